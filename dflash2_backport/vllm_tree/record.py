"""Keep an installed vLLM's `.dist-info/RECORD` true to the files on disk.

pip uninstalls exactly what RECORD lists. Rows of the files the edits change
get their new hashes and sizes, and the installed modules get rows of their
own, so `pip uninstall vllm` removes everything this tool added and `pip
check`-style verification sees no mismatch. Rows are updated in place (the
path as it was spelt, quotes and all) and new rows are appended, so
reverting restores RECORD byte for byte.

Only the tool's own rows are its to write. A row without a hash (pip's way
of listing a file it does not vouch for) stays as it is, an edited file
without a row gets none, and a file at a module's path that the tool did not
install (upstream's, someone else's, one marked to be kept) gets no row from
it and keeps whatever row it has: a row the tool added for it would have
`pip uninstall vllm` delete the user's file.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import os
from pathlib import Path

from ..utils.errors import BackportError
from ..utils.safe_files import STAGED_SUFFIX


def dist_info(root: Path) -> Path | None:
    """vLLM's one `.dist-info` directory in a site-packages, or None.

    Two of them (0.27.1 and 0.28.0 left side by side by an interrupted
    upgrade, say) leave it unclear which one pip believes; the tool will not
    guess.
    """
    found = sorted(p for p in root.glob("vllm-*.dist-info") if p.is_dir() and not _emptied(p))
    if len(found) > 1:
        names = " and ".join(p.name for p in found)
        raise BackportError(
            f"{root}: two vLLM distributions are recorded ({names}); nothing was written; "
            "remove the stale one (or reinstall vLLM) so that one remains"
        )
    return found[0] if found else None


def _emptied(info: Path) -> bool:
    """A dist-info that holds nothing but what a killed run of this tool
    staged there: what `pip uninstall` leaves of one, since pip removes
    only what RECORD lists. No distribution (pip skips it, having no
    METADATA); counted as one, it would stop every later run."""
    try:
        names = [p.name for p in info.iterdir()]
    except OSError:
        return False
    return bool(names) and all(name.endswith(STAGED_SUFFIX) for name in names)


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


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"="
    ).decode()


def row(path: str, data: bytes) -> str:
    return f"{path},{_digest(data)},{len(data)}"


@dataclasses.dataclass(frozen=True)
class Rows:
    """What RECORD must say of the files a command leaves behind."""

    #: vLLM's own files the edits touch, as they will be: a row with a hash
    #: follows the content; none is added.
    edited: dict[str, bytes]
    #: The tool's modules, in place: each has a row that matches it.
    installed: dict[str, bytes]
    #: The tool's modules, not in place: their rows go. None: whatever the
    #: row holds (the command removes the tool's file now); bytes: only a
    #: row that hashes them (the file was gone already: a row of someone
    #: else's is theirs).
    removed: dict[str, bytes | None]


def reconcile(path: Path, record: bytes, rows: Rows) -> bytes:
    """RECORD with the tool's rows as `rows` says; every other row as it is."""
    try:
        text = record.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BackportError(
            f"{path}: not valid UTF-8 (byte {record[error.start]:#04x} at offset "
            f"{error.start}); nothing was written; reinstall vLLM to restore its RECORD"
        ) from None
    lines = []
    listed = set()
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        fields = next(csv.reader([body]), [])
        name = fields[0] if fields else None
        if name in rows.edited and len(fields) >= 3 and fields[1]:
            # Hash and size are the last two fields, and hold no comma.
            spelt = body.rsplit(",", 2)[0]
            content = rows.edited[name]
            line = f"{spelt},{_digest(content)},{len(content)}" + line[len(body):]
        elif name in rows.installed:
            listed.add(name)
            line = row(name, rows.installed[name]) + line[len(body):]
        elif name in rows.removed:
            theirs = rows.removed[name]
            if theirs is None or (len(fields) >= 2 and fields[1] == _digest(theirs)):
                continue
        lines.append(line)
    added = [name for name in rows.installed if name not in listed]
    if added:
        newline = "\r\n" if lines and lines[-1].endswith("\r\n") else "\n"
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        lines.extend(row(name, rows.installed[name]) + newline for name in added)
    return "".join(lines).encode("utf-8")
