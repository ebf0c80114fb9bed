"""One writer per vLLM tree at a time.

`apply` and `revert` hold an exclusive advisory lock on `vllm/.dflash2-backport.lock`
from before they plan until after they commit. A second writer (every rank of
a multi-GPU job running `apply` at start-up, say) waits, bounded, with a
message naming the holder, and then plans again from what is on disk, so it
finds nothing left to do.

The lock file exists only while it is held: its holder removes it before
letting go, and a waiter that wins the lock on a file that has since been
removed or replaced tries again, so no two processes ever hold locks on
different files. A holder killed with SIGKILL leaves the file behind; the
kernel has released its lock, and the next writer takes the file over.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from .errors import BackportError

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


def _holder(descriptor: int) -> str:
    try:
        text = os.pread(descriptor, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another dflash2-backport process"


class TreeLock:
    def __init__(self, root: Path, command: str) -> None:
        self.path = lock_path(root)
        self.command = command
        self._descriptor: int | None = None

    def acquire(self, timeout: float, on_wait: Callable[[str], None]) -> None:
        deadline = time.monotonic() + timeout
        announced = False
        delay = 0.02
        while True:
            descriptor = self._open()
            if descriptor is None:
                return
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(descriptor)
                os.close(descriptor)
                if time.monotonic() >= deadline:
                    raise BackportError(
                        f"{self.path}: gave up after {timeout:g} s waiting for {holder}; "
                        "nothing was written; run the command again once it has finished "
                        "(or raise DFLASH2_BACKPORT_LOCK_TIMEOUT)"
                    ) from None
                if not announced:
                    on_wait(f"waiting for {holder} to finish with {self.path.parent.parent}")
                    announced = True
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            if self._still_ours(descriptor):
                break
            os.close(descriptor)
        import socket

        note = (
            f"pid {os.getpid()} on {socket.gethostname()} "
            f"(dflash2-backport {self.command}, since {time.strftime('%H:%M:%S')})\n"
        ).encode()
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, note, 0)
        self._descriptor = descriptor

    def release(self) -> None:
        if self._descriptor is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass  # the next holder takes the file over
        os.close(self._descriptor)
        self._descriptor = None

    def _open(self) -> int | None:
        """The lock file, or None where this user cannot write to vllm/ at all:
        there nobody like this process can write either, so there is nothing
        to serialise, and an `apply` with nothing left to do still succeeds
        (a launch script on a read-only image, say)."""
        try:
            descriptor = os.open(
                self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except (PermissionError, OSError) as error:
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None
            raise BackportError(
                f"{self.path}: cannot create the lock file ({error.strerror}); "
                "nothing was written; run as a user who may write to vllm/"
            ) from None
        _match_directory_owner(descriptor, self.path.parent)
        return descriptor

    def _still_ours(self, descriptor: int) -> bool:
        try:
            on_disk = os.lstat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(descriptor)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def __enter__(self) -> TreeLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _match_directory_owner(descriptor: int, directory: Path) -> None:
    # Root creating the lock in a user's venv must not leave a root-owned
    # file the owner cannot open after a SIGKILL.
    if os.geteuid() != 0:
        return
    info = os.stat(directory)
    mine = os.fstat(descriptor)
    if (mine.st_uid, mine.st_gid) != (info.st_uid, info.st_gid):
        os.fchown(descriptor, info.st_uid, info.st_gid)


def writer_active(root: Path) -> str | None:
    """For a read-only command: who holds the lock now, or None. Opens the
    lock file read-only and creates nothing."""
    path = lock_path(root)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(descriptor)
        return None
    finally:
        os.close(descriptor)
