"""What stops a commit before it writes anything: a file or directory this
user may not write, a read-only mount, and bytecode that Python would run
instead of the rewritten source."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..utils.errors import READ_ONLY_MOUNT_REMEDY, BackportError
from ..utils.safe_files import read_regular

if TYPE_CHECKING:
    from .commit import Change


_GIVE_WRITE_ACCESS = (
    "give this user write access to it (or run as its owner), then run the command again"
)


def _on_read_only_mount(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_writable(root: Path, changes: Iterable[Change]) -> None:
    # A file its owner made read-only is refused, as before any write; the
    # rename itself would only need the directory to be writable.
    for change in changes:
        path = root / change.path
        directory = path.parent
        while not directory.exists():
            directory = directory.parent
        if _on_read_only_mount(directory):
            raise BackportError(
                f"{directory}: on a file system mounted read-only; nothing was written; "
                f"{READ_ONLY_MOUNT_REMEDY}"
            )
        if change.before is not None and not os.access(path, os.W_OK):
            raise BackportError(f"{path}: read-only; nothing was written; {_GIVE_WRITE_ACCESS}")
        if not os.access(directory, os.W_OK):
            raise BackportError(
                f"{directory}: directory is read-only; nothing was written; {_GIVE_WRITE_ACCESS}"
            )


def _unchecked_bytecode(path: Path) -> Path | None:
    """Bytecode of `path` compiled as unchecked-hash (`compileall
    --invalidation-mode unchecked-hash`, as reproducible image builds do):
    Python runs it without looking at the source, so an edit of the source
    would not take effect."""
    try:
        candidates = sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
    except OSError:
        return None
    for pyc in candidates:
        try:
            # No link followed, no FIFO opened: a __pycache__ entry may be either.
            header = (read_regular(pyc) or b"")[:8]
        except (BackportError, OSError):
            continue
        # The header's flags: bit 0 hash-based, bit 1 check the source.
        if len(header) == 8 and int.from_bytes(header[4:8], "little") & 0b11 == 0b01:
            return pyc
    return None


def check_bytecode(root: Path, changes: Iterable[Change]) -> None:
    for change in changes:
        path = root / change.path
        if path.suffix != ".py" or change.before is None or change.after is None:
            continue
        pyc = _unchecked_bytecode(path)
        if pyc is not None:
            raise BackportError(
                f"{pyc}: unchecked-hash bytecode, which Python runs without reading "
                f"{path.name}, so the change would not take effect; nothing was written; "
                "remove it (or vLLM's __pycache__ directories), run the command again, "
                "and compile afresh afterwards if the image needs it"
            )
