"""Keep an installed vLLM's `.dist-info/RECORD` true to the files on disk.

pip uninstalls exactly what RECORD lists. Rows of the files the edits change
get their new hashes and sizes, and the installed modules get rows of their
own, so `pip uninstall vllm` removes everything this tool added and `pip
check`-style verification sees no mismatch. Rows are updated in place and new
rows are appended, so reverting restores RECORD byte for byte.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
from pathlib import Path

from ..utils.errors import BackportError


def dist_info(root: Path) -> Path | None:
    """vLLM's one `.dist-info` directory in a site-packages, or None.

    Two of them (0.27.1 and 0.28.0 left side by side by an interrupted
    upgrade, say) leave it unclear which one pip believes; the tool will not
    guess.
    """
    found = sorted(p for p in root.glob("vllm-*.dist-info") if p.is_dir())
    if len(found) > 1:
        names = " and ".join(p.name for p in found)
        raise BackportError(
            f"{root}: two vLLM distributions are recorded ({names}); nothing was written; "
            "remove the stale one (or reinstall vLLM) so that one remains"
        )
    return found[0] if found else None


def record_of(root: Path) -> tuple[Path | None, str | None]:
    """vLLM's RECORD in a site-packages, and a note when there is none."""
    info = dist_info(root)
    if info is None:
        return None, (
            "no vllm-*.dist-info here: pip will not know about the installed modules, "
            "and `pip uninstall vllm` will leave them behind"
        )
    record = info / "RECORD"
    if not os.path.lexists(record):
        return None, (
            f"{info.name} has no RECORD: pip will not know about the installed modules, "
            "and `pip uninstall vllm` will leave them behind"
        )
    return record, None


def row(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def reconcile(path: Path, record: bytes, files: dict[str, bytes | None]) -> bytes:
    """RECORD with rows for `files` (relative path -> content, None if absent)
    matching them; every other row is kept as it is."""
    wanted = dict(files)
    lines = []
    try:
        text = record.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BackportError(
            f"{path}: not valid UTF-8 (byte {record[error.start]:#04x} at offset "
            f"{error.start}); nothing was written; reinstall vLLM to restore its RECORD"
        ) from None
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        fields = next(csv.reader([body]), [])
        path = fields[0] if fields else None
        if path in wanted:
            content = wanted.pop(path)
            if content is None:
                continue
            line = row(path, content) + line[len(body):]
        lines.append(line)
    added = [path for path, content in wanted.items() if content is not None]
    if added:
        newline = "\r\n" if lines and lines[-1].endswith("\r\n") else "\n"
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        lines.extend(row(path, wanted[path]) + newline for path in added)
    return "".join(lines).encode("utf-8")
