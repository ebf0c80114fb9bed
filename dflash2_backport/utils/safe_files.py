"""Reading a target's files without following links or blocking on FIFOs.

vLLM's files may be links into a shared store (a container layer, a Nix or
Bazel store, uv's cache seen through a link): writing through one would
change every environment that shares it. A FIFO where a file should be would
block a plain read forever. So every path the tool reads or replaces is
reached through directories opened one name at a time without following
links (`Tree`), and anything but a regular file (or a real directory on the
way to it) is refused with the path named.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from .errors import BackportError

_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


#: What a commit stages a file's new content under, beside it, before the
#: rename (transaction.commit); what a killed run leaves behind.
STAGED_SUFFIX = ".dflash2-backport-new"

def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def link_refusal(path: Path, target: str, kind: str = "file") -> BackportError:
    return BackportError(
        f"{path}: is a symlink (to {target}); the tool reads and writes no file through "
        "a link, which may point into a store other environments share (uv's cache, "
        "for an install made with --link-mode symlink); reinstall vLLM with copies "
        f"(uv: --link-mode copy), or replace the link with a copy of the {kind}, or "
        "patch its target with --root"
    )


def unreadable(path: Path, error: OSError) -> BackportError:
    remedy = (
        "; run as a user who may read it" if error.errno in (errno.EACCES, errno.EPERM) else ""
    )
    return BackportError(f"{path}: cannot be read ({error.strerror}); nothing was written{remedy}")


def kind_refusal(path: Path, mode: int, expected: str = "a regular file") -> BackportError:
    return BackportError(
        f"{path}: is {kind_of(mode)}, expected {expected}; nothing was written; "
        f"replace it with {expected}"
    )


def read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file, None when absent; never follows a link
    at the last step nor opens a FIFO."""
    with Tree(path.parent) as tree:
        return tree.read(path.name)


def decode_source(path: str | os.PathLike, data: bytes) -> str:
    """Python source as text, in the encoding its PEP 263 cookie declares
    (UTF-8 when there is none); one line naming the file when it is not."""
    # CPython translates newlines before it reads the first two lines for a
    # cookie; as it is, a file whose lines end in CR alone is one line to
    # `detect_encoding`, and a comment anywhere in it such as
    # `# speculative decoding: compute K` would name its encoding.
    head = b"\n".join(data.splitlines()[:2])
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
    except SyntaxError as error:
        if not error.msg.startswith("invalid or missing encoding declaration"):
            raise BackportError(f"{path}: {error.msg}; fix the file") from None
        # No cookie, and the first lines are not UTF-8: the decoding below
        # says where.
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        # Lines end at CR, LF or CRLF, as Python counts them.
        line = len((data[: error.start] + b"x").splitlines())
        raise BackportError(
            f"{path}: not valid {encoding} (line {line}: byte "
            f"{data[error.start]:#04x}, {error.reason}); fix the file or declare "
            "its encoding"
        ) from None


class Tree:
    """Directories under a target's root, each opened one name at a time
    without following links.

    Root may run the tool on a tree another user can write. A path checked
    with lstat and then used by name can be swapped for a link in between;
    a directory descriptor cannot. So the commit, the lock and recovery act
    only through descriptors this class opened, on single names: what was
    checked is what is written.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._open: dict[str, int] = {}

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for descriptor in self._open.values():
            os.close(descriptor)
        self._open.clear()

    def directory(self, relative: str) -> int | None:
        """A descriptor of `root/relative`, or None when it does not exist.
        A link, or anything but a directory, on the way is refused by path."""
        relative = relative.strip("/")
        if relative in self._open:
            return self._open[relative]
        if not relative:
            try:
                descriptor = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            except OSError as error:
                raise unreadable(self.root, error) from None
            self._open[""] = descriptor
            return descriptor
        parent_path, _, name = relative.rpartition("/")
        parent = self.directory(parent_path)
        if parent is None:
            return None
        try:
            descriptor = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
            )
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                # A file where a directory goes: the planner reports it as
                # drift, with the module it blocks named.
                return None
            if stat.S_ISLNK(info.st_mode):
                raise link_refusal(
                    self.root / relative, os.readlink(name, dir_fd=parent), "directory"
                ) from None
            raise kind_refusal(self.root / relative, info.st_mode, "a directory") from None
        except OSError as error:
            self._refuse(parent, name, relative, error, expected="a directory")
        self._open[relative] = descriptor
        return descriptor

    def parent_of(self, relative: str) -> tuple[int | None, str]:
        """The descriptor of a file's directory (None: missing), and its name."""
        directory, _, name = relative.rpartition("/")
        return self.directory(directory), name

    def lstat(self, relative: str) -> os.stat_result | None:
        directory, name = self.parent_of(relative)
        if directory is None:
            return None
        try:
            return os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(self, relative: str, limit: int | None = None) -> bytes | None:
        """The bytes of a regular file, None when it is absent. Past `limit`
        bytes it is refused: a file someone planted may be of any size."""
        directory, name = self.parent_of(relative)
        if directory is None:
            return None
        try:
            descriptor = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
            )
        except FileNotFoundError:
            return None
        except OSError as error:
            self._refuse(directory, name, relative, error, expected="a regular file")
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            os.close(descriptor)
            raise kind_refusal(self.root / relative, info.st_mode)
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read(-1 if limit is None else limit + 1)
            if limit is not None and len(data) > limit:
                raise BackportError(
                    f"{self.root / relative}: larger than {limit} bytes, which no file of "
                    "this tool's is; nothing was written; remove it if it is not yours"
                )
            return data

    @contextlib.contextmanager
    def naming(self, relative: str) -> Iterator[None]:
        """Give an error of a call made through a directory descriptor the
        path in full: the kernel only knows the single name it was given."""
        try:
            yield
        except OSError as error:
            error.filename = str(self.root / relative)
            error.filename2 = None
            raise

    def refuse_unless_regular(self, relative: str, info: os.stat_result) -> None:
        """Refuse, by path, what lstat found at an owned file's place when it
        is not a regular file (a link is named with where it points)."""
        if stat.S_ISREG(info.st_mode):
            return
        path = self.root / relative
        if stat.S_ISLNK(info.st_mode):
            directory, name = self.parent_of(relative)
            raise link_refusal(path, os.readlink(name, dir_fd=directory))
        raise kind_refusal(path, info.st_mode)

    def _refuse(
        self, directory: int, name: str, relative: str, error: OSError, expected: str
    ) -> NoReturn:
        path = self.root / relative
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except OSError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                kind = "directory" if expected == "a directory" else "file"
                raise link_refusal(path, os.readlink(name, dir_fd=directory), kind) from None
            if info is not None:
                raise kind_refusal(path, info.st_mode, expected) from None
        raise unreadable(path, error) from None
