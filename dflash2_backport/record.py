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
from pathlib import Path


def record_of(root: Path) -> Path | None:
    """vLLM's RECORD in a site-packages, or None (a source tree has none)."""
    records = sorted(root.glob("vllm-*.dist-info/RECORD"))
    return records[0] if len(records) == 1 else None


def row(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def reconcile(record: bytes, files: dict[str, bytes | None]) -> bytes:
    """RECORD with rows for `files` (relative path -> content, None if absent)
    matching them; every other row is kept as it is."""
    wanted = dict(files)
    lines = []
    for line in record.decode("utf-8").splitlines(keepends=True):
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
