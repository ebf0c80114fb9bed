"""Reading a target's files without following links or blocking on FIFOs.

vLLM's files may be links into a shared store (a container layer, a Nix or
Bazel store, uv's cache seen through a link): writing through one would
change every environment that shares it. A FIFO where a file should be would
block a plain read forever. So every path the tool reads or replaces is
checked with lstat first, and anything but a regular file (or a real
directory on the way to it) is refused with the path named.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from pathlib import Path

from .errors import BackportError

_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse_link(path: Path) -> None:
    target = os.readlink(path)
    raise BackportError(
        f"{path}: is a symlink (to {target}); the tool does not write through links, "
        "which may point into a store other environments share; replace the link "
        "with a copy of the file, or patch its target with --root"
    )


def check_path(root: Path, relative: str, *, file_expected: bool = True) -> os.stat_result | None:
    """lstat of `root/relative`, or None when it does not exist.

    Every directory between `root` and the file must be a real directory,
    and the file itself a regular file (when `file_expected`).
    """
    current = root
    parts = Path(relative).parts
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise BackportError(f"{current}: cannot be read ({error.strerror})") from None
        last = index == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            _refuse_link(current)
        if not last and not stat.S_ISDIR(info.st_mode):
            # A file where a directory goes: the callers that plan modules
            # report this as drift, with the file named.
            return None
        if last and file_expected and not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                return info  # callers word this case themselves
            raise BackportError(
                f"{current}: is {kind_of(info.st_mode)}, expected a regular file; "
                "nothing was written; replace it with a regular file"
            )
        if last:
            return info
    return None


def read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file, None when absent; never follows a link
    at the last step nor opens a FIFO."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == 40:  # ELOOP: the last component is a link
            _refuse_link(path)
        raise BackportError(f"{path}: cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BackportError(
                f"{path}: is {kind_of(info.st_mode)}, expected a regular file; "
                "nothing was written; replace it with a regular file"
            )
        return handle.read()


def decode_source(path: str | os.PathLike, data: bytes) -> str:
    """Python source as text, in the encoding its PEP 263 cookie declares
    (UTF-8 when there is none); one line naming the file when it is not."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if not error.msg.startswith("invalid or missing encoding declaration"):
            raise BackportError(f"{path}: {error.msg}; fix the file") from None
        # No cookie, and the first lines are not UTF-8: the decoding below
        # says where.
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise BackportError(
            f"{path}: not valid {encoding} (line {line}: byte "
            f"{data[error.start]:#04x}, {error.reason}); fix the file or declare "
            "its encoding"
        ) from None
