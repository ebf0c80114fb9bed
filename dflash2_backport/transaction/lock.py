"""One writer per vLLM tree at a time.

`apply` and `revert` hold an exclusive advisory lock on `vllm/.dflash2-backport.lock`
from before they plan until after they commit. A second writer (every rank of
a multi-GPU job running `apply` at start-up, say) waits, bounded, with a
message naming the holder, and then plans again from what is on disk, so it
finds nothing left to do.

The lock file exists only while it is held: its holder removes it before
letting go, and a waiter that wins the lock on a file that has since been
removed or replaced tries again, so no two processes ever hold locks on
different files. Creating the file and recording that it must be removed
happen with signals deferred, so no Ctrl-C or SIGTERM falls between them. A
holder killed with SIGKILL leaves the file behind; the kernel has released
its lock, and the next writer takes the file over.

Whoever can write `vllm/` can plant something at the lock's name. The file
is opened through a descriptor of `vllm/` itself, never through a link, and
taken only when it is a regular file with no other name: a hard link to a
file elsewhere is refused, never truncated, written or chowned.

Only those who may write `vllm/` may open the lock file: it is made
readable and writable by its owner, and by the directory's group or by
everyone only where they may write `vllm/` too. A user who may only read the
tree could otherwise open a lock file a killed run left behind and hold it,
keeping every writer out.

The lock holds whenever `vllm/` can be written. `flock` needs no write
access to the file, so a lock file this user cannot write (one root left
behind when it was killed before giving it to the tree's owner, one made
read-only, or another member's in a group-shared tree) is opened read-only
and locked all the same; only its note of who holds it goes unwritten.
There is nothing to serialise only where `vllm/` itself cannot be written:
whoever runs there writes nothing. A lock file that cannot be opened at all
in a writable `vllm/` stops the run, naming it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ..utils import interrupts
from ..utils.errors import BackportError
from ..utils.safe_files import Tree, kind_of

LOCK_NAME = ".dflash2-backport.lock"
DEFAULT_TIMEOUT_S = 300.0


def lock_path(root: Path) -> Path:
    return root / "vllm" / LOCK_NAME


def timeout_from_environment() -> float:
    configured = os.environ.get("DFLASH2_BACKPORT_LOCK_TIMEOUT", "")
    try:
        return max(0.0, float(configured)) if configured else DEFAULT_TIMEOUT_S
    except ValueError:
        raise BackportError(
            f"DFLASH2_BACKPORT_LOCK_TIMEOUT={configured!r}: expected a number of seconds"
        ) from None


_ANONYMOUS = "another dflash2-backport process"
_NOTE = re.compile(r"pid (\d+) on (\S+) ")


def _holder(descriptor: int) -> str:
    """Who holds the lock, from its note. A holder that could not write the
    file leaves an earlier holder's note there: one naming a process of this
    host that has exited is not the holder's."""
    try:
        text = os.pread(descriptor, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    note = _NOTE.match(text)
    if note is None:
        return _ANONYMOUS
    import socket

    if note[2] == socket.gethostname() and not _alive(int(note[1])):
        return _ANONYMOUS
    return text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse_planted(path: Path, info: os.stat_result) -> None:
    """A lock file is ours to take only as a regular file with one name."""
    if not stat.S_ISREG(info.st_mode):
        raise BackportError(
            f"{path}: is {kind_of(info.st_mode)}, not this tool's lock file; nothing was "
            "written; remove it, then run the command again"
        )
    if info.st_nlink != 1:
        raise BackportError(
            f"{path}: has {info.st_nlink} hard links, so it is another file's name too, "
            "not this tool's lock file; nothing was written; remove it, then run the "
            "command again"
        )


class TreeLock:
    def __init__(self, root: Path, command: str) -> None:
        self.path = lock_path(root)
        self.command = command
        self._tree = Tree(root)
        self._directory: int | None = None
        self._descriptor: int | None = None
        #: Whether the lock file was opened for writing (its note with it).
        self._writable = False

    def acquire(self, timeout: float, on_wait: Callable[[str], None]) -> None:
        deadline = time.monotonic() + timeout
        announced = False
        delay = 0.02
        self._directory = self._tree.directory("vllm")
        if self._directory is None:
            raise BackportError(f"{self.path.parent}: missing; nothing was written")
        while True:
            with interrupts.deferred():
                holder = self._try_once()
            if holder is None:
                break
            if time.monotonic() >= deadline:
                raise BackportError(
                    f"{self.path}: gave up after {timeout:g} s waiting for {holder}; "
                    "nothing was written; run the command again once it has finished "
                    "(or raise DFLASH2_BACKPORT_LOCK_TIMEOUT)"
                )
            if not announced:
                on_wait(f"waiting for {holder} to finish with {self.path.parent.parent}")
                announced = True
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        if self._descriptor is None or not self._writable:
            return  # nothing to serialise, or a lock file this user may only read
        import socket

        note = (
            f"pid {os.getpid()} on {socket.gethostname()} "
            f"(dflash2-backport {self.command}, since {time.strftime('%H:%M:%S')})\n"
        ).encode()
        with interrupts.deferred():
            try:
                os.ftruncate(self._descriptor, 0)
                os.pwrite(self._descriptor, note, 0)
            except OSError as error:
                self.release()
                raise BackportError(
                    f"{self.path}: cannot write the lock file ({error.strerror}); "
                    "nothing was written"
                ) from None

    def _try_once(self) -> str | None:
        """Take the lock if it is free: None when taken (or when there is
        nothing to take), else who holds it."""
        while True:
            descriptor = self._open()
            if descriptor is None:
                return None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(descriptor)
                os.close(descriptor)
                return holder
            if self._still_ours(descriptor):
                self._descriptor = descriptor
                return None
            # Its holder removed it after we opened it: another writer may
            # have a new file at that name by now. Try again from the name.
            os.close(descriptor)

    def release(self) -> None:
        with interrupts.deferred():
            if self._descriptor is not None:
                if self._still_ours(self._descriptor):
                    try:
                        os.unlink(LOCK_NAME, dir_fd=self._directory)
                    except OSError:
                        pass  # the next holder takes the file over
                os.close(self._descriptor)
                self._descriptor = None
            self._tree.close()

    def _open(self) -> int | None:
        """The lock file, or None where this user cannot write to vllm/ at
        all: there nobody like this process can write either, so there is
        nothing to serialise, and an `apply` with nothing left to do still
        succeeds (a launch script on a read-only image, say)."""
        while True:
            descriptor = self._open_once()
            if descriptor is None:
                return None
            try:
                info = os.fstat(descriptor)
                if info.st_nlink != 0:
                    _refuse_planted(self.path, info)
                    if self._writable:
                        _match_directory_owner(descriptor, self._directory)
                        _open_only_to_writers(descriptor, self._directory)
                    return descriptor
            except BaseException:
                os.close(descriptor)
                raise
            # Its holder removed it between our open and our look at it (its
            # release): not a planted file. Open whatever the name is now.
            os.close(descriptor)

    def _open_once(self) -> int | None:
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            descriptor = os.open(
                LOCK_NAME, os.O_RDWR | os.O_CREAT | flags, 0o600, dir_fd=self._directory
            )
            self._writable = True
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                self._refuse(error)
            # flock needs no write access: a lock file this user can only
            # read locks as well as any.
            try:
                descriptor = os.open(LOCK_NAME, os.O_RDONLY | flags, dir_fd=self._directory)
            except FileNotFoundError:
                if not self._directory_writable():
                    return None
                self._refuse(error)
            except OSError as second:
                if second.errno in (errno.EACCES, errno.EPERM) and not self._directory_writable():
                    return None
                self._refuse(second)
            self._writable = False
        return descriptor

    def _directory_writable(self) -> bool:
        return os.access(".", os.W_OK, dir_fd=self._directory, effective_ids=True)

    def _refuse(self, error: OSError) -> NoReturn:
        if error.errno in (errno.ELOOP, errno.EISDIR):
            _refuse_planted(
                self.path, os.stat(LOCK_NAME, dir_fd=self._directory, follow_symlinks=False)
            )
        if self._directory_writable():
            raise BackportError(
                f"{self.path}: cannot be opened ({error.strerror}), though "
                f"{self.path.parent} is writable, so this run could not keep others "
                "out; nothing was written; once no dflash2-backport run is at work "
                "on this tree, remove the lock file and run the command again"
            ) from None
        raise BackportError(
            f"{self.path}: cannot be created ({error.strerror}); nothing was written; "
            f"run as a user who may write to {self.path.parent}"
        ) from None

    def _still_ours(self, descriptor: int) -> bool:
        try:
            on_disk = os.stat(LOCK_NAME, dir_fd=self._directory, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(descriptor)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def __enter__(self) -> TreeLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _match_directory_owner(descriptor: int, directory: int) -> None:
    # Root creating the lock in a user's venv must not leave a root-owned
    # file the owner cannot open after a SIGKILL.
    if os.geteuid() != 0:
        return
    info = os.fstat(directory)
    mine = os.fstat(descriptor)
    if (mine.st_uid, mine.st_gid) != (info.st_uid, info.st_gid):
        os.fchown(descriptor, info.st_uid, info.st_gid)


def _open_only_to_writers(descriptor: int, directory: int) -> None:
    """The lock file's permissions follow who may write `vllm/`: its owner,
    its group if the directory is group-writable (the group shares the
    directory's, so that each member can open it), everyone if anyone may
    write there."""
    folder, mine = os.fstat(directory), os.fstat(descriptor)
    wanted = 0o600
    if folder.st_mode & stat.S_IWGRP:
        wanted |= 0o060
        if mine.st_gid != folder.st_gid:
            try:
                os.fchown(descriptor, -1, folder.st_gid)
            except OSError:
                pass  # not a member: the members' own runs open it read-only
    if folder.st_mode & stat.S_IWOTH:
        wanted |= 0o006
    current = stat.S_IMODE(mine.st_mode)
    # A lock someone made read-only stays read-only: only narrowed.
    mode = wanted if current & stat.S_IWUSR else current & wanted
    if mode != current:
        try:
            os.fchmod(descriptor, mode)
        except OSError:
            pass  # another user's file: what it allows is theirs to say


def writer_active(root: Path) -> str | None:
    """For a read-only command: who holds the lock now, or None. Opens the
    lock file read-only, through no link, and creates nothing."""
    with Tree(root) as tree:
        directory = tree.directory("vllm")
        if directory is None:
            return None
        try:
            descriptor = os.open(
                LOCK_NAME,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=directory,
            )
        except OSError:
            return None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(descriptor)
        return None
    finally:
        os.close(descriptor)
