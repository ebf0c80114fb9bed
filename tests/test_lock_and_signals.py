"""The lock and the signal handlers, in process, where an interleaving can be forced.

Each race here is made to happen at a chosen instant by wrapping the system
call the lock makes, not left to luck.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport import interrupts
from dflash2_backport.cli import app
from dflash2_backport.errors import BackportError, Interrupted
from dflash2_backport.lock import TreeLock, lock_path, timeout_from_environment

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "vllm").mkdir()
    return tmp_path


def test_a_waiter_that_locked_a_removed_file_tries_again_and_never_holds_beside_another(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holds the lock. B has opened A's file and is about to lock it when
    A lets go (removing the file) and C takes a new file at the same name.
    B's lock on the removed file must not count: B waits for C."""
    first, second, third = (TreeLock(tree, "apply") for _ in range(3))
    first.acquire(1, lambda _: None)
    real = fcntl.flock
    interleaved = []

    def flock(descriptor: int, operation: int) -> None:
        if not interleaved and descriptor != getattr(third, "_descriptor", None):
            interleaved.append(descriptor)
            first.release()
            third.acquire(1, lambda _: None)
        return real(descriptor, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(BackportError, match="gave up"):
        second.acquire(0.5, lambda _: None)
    assert interleaved, "the interleaving did not happen"
    assert second._descriptor is None and third._descriptor is not None
    third.release()


def test_the_default_lock_timeout_is_the_documented_one(monkeypatch: pytest.MonkeyPatch) -> None:
    (documented,) = re.findall(r"waits \(up to (\d+) s", README.read_text())
    monkeypatch.delenv("DFLASH2_BACKPORT_LOCK_TIMEOUT", raising=False)
    assert timeout_from_environment() == float(documented) == 300


def test_a_signal_while_the_lock_is_taken_leaves_no_lock_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fcntl.flock

    def flock_then_ctrl_c(descriptor: int, operation: int) -> None:
        real(descriptor, operation)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(fcntl, "flock", flock_then_ctrl_c)
    with interrupts.stopping_on_signals(), pytest.raises(Interrupted):
        with TreeLock(tree, "apply") as lock:
            lock.acquire(5, lambda _: None)
    assert not lock_path(tree).exists()


def test_a_full_disk_while_the_lock_is_taken_leaves_no_lock_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(*_: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", no_space)
    # An acquire that fails leaves nothing behind by itself, with or without
    # a `with` block around it.
    with pytest.raises(BackportError, match="No space left on device"):
        TreeLock(tree, "apply").acquire(5, lambda _: None)
    assert not lock_path(tree).exists()


# verify's interpreter here has no vLLM: it fails after taking the handlers.
@pytest.mark.parametrize(
    "command",
    [["check"], ["apply"], ["revert"], ["verify", "--python", sys.executable]],
    ids=lambda command: command[0],
)
def test_an_in_process_run_gives_the_callers_signal_handlers_back(
    tree: Path, command: list[str]
) -> None:
    def callers_own(*_: object) -> None:
        pass

    arguments = command if command[0] == "verify" else [*command, "--root", str(tree)]
    previous = {s: signal.signal(s, callers_own) for s in interrupts.SIGNALS}
    try:
        CliRunner().invoke(app, arguments)
        assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == dict.fromkeys(
            interrupts.SIGNALS, callers_own
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
