"""The lock and the signal handlers, in process, where an interleaving can be forced.

Each race here is made to happen at a chosen instant by wrapping the system
call the lock makes, not left to luck.
"""

from __future__ import annotations

import json
import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from dflash2_backport.transaction.lock import (
    TreeLock,
    lock_path,
    timeout_from_environment,
)
from dflash2_backport.utils import interrupts
from dflash2_backport.utils.errors import BackportError, Interrupted

SAFETY = Path(__file__).resolve().parents[2] / "docs" / "safety.md"


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


def test_a_lock_file_removed_by_its_holder_before_a_waiter_looks_at_it_is_no_planted_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holds the lock. B opens A's file, and before B looks at what it
    opened A lets go, removing the file: B holds a name-less file (no hard
    link at all). That is A's release, not a file planted under the lock's
    name: B must open the name again and take the lock, not refuse."""
    first, second = TreeLock(tree, "apply"), TreeLock(tree, "apply")
    first.acquire(1, lambda _: None)
    real = os.fstat
    interleaved = []

    def fstat(descriptor: int) -> os.stat_result:
        if not interleaved and descriptor != first._descriptor:
            interleaved.append(descriptor)
            first.release()
        return real(descriptor)

    monkeypatch.setattr(os, "fstat", fstat)
    second.acquire(1, lambda _: None)
    assert interleaved, "the interleaving did not happen"
    assert second._descriptor is not None and second._still_ours(second._descriptor)
    second.release()
    assert not lock_path(tree).exists()


def test_the_default_lock_timeout_is_the_documented_one(monkeypatch: pytest.MonkeyPatch) -> None:
    (documented,) = re.findall(r"waits \(up to (\d+) s", SAFETY.read_text())
    monkeypatch.delenv("DFLASH2_BACKPORT_LOCK_TIMEOUT", raising=False)
    assert timeout_from_environment() == float(documented) == 300


def test_a_signal_while_the_lock_is_taken_leaves_no_lock_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fcntl.flock

    def flock_then_ctrl_c(descriptor: int, operation: int) -> None:
        real(descriptor, operation)
        # To this thread, as the one-threaded tool gets it: a test worker has
        # other threads, which may take a signal sent to the process while
        # this one blocks it.
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

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


def _refusing_to_write(monkeypatch: pytest.MonkeyPatch, also_reading: bool = False) -> None:
    """Opening the lock file for writing fails as it does for a user who
    may write vllm/ but not that file (and, with `also_reading`, for one
    who may not even read it)."""
    real = os.open

    def open_(path, flags, *args, **kwargs):
        if path == ".dflash2-backport.lock" and (also_reading or flags & os.O_RDWR):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


def test_a_lock_file_this_user_may_only_read_still_keeps_a_second_writer_out(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_path(tree).write_text("")
    first = TreeLock(tree, "apply")
    _refusing_to_write(monkeypatch)
    first.acquire(1, lambda _: None)
    try:
        assert first._descriptor is not None, "no lock taken: nothing keeps others out"
        with pytest.raises(BackportError, match="gave up"):
            TreeLock(tree, "apply").acquire(0.3, lambda _: None)
    finally:
        first.release()
    assert not lock_path(tree).exists()


def test_a_lock_file_that_cannot_be_opened_in_a_writable_tree_stops_the_run_naming_it(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_path(tree).write_text("")
    _refusing_to_write(monkeypatch, also_reading=True)
    with pytest.raises(BackportError) as refused:
        TreeLock(tree, "apply").acquire(1, lambda _: None)
    message = str(refused.value)
    assert message.startswith(f"{lock_path(tree)}: cannot be opened (Permission denied)")
    assert "nothing was written" in message and "remove the lock file" in message
    assert lock_path(tree).exists()


def test_a_directory_at_the_lock_name_is_named_and_its_removal_advised(tree: Path) -> None:
    lock_path(tree).mkdir()
    with pytest.raises(BackportError) as refused:
        TreeLock(tree, "apply").acquire(1, lambda _: None)
    message = str(refused.value)
    assert message.startswith(f"{lock_path(tree)}: is a directory, not this tool's lock file")
    assert "remove it" in message and "may write to" not in message


def test_a_stale_note_of_an_exited_process_is_not_named_as_the_holder(tree: Path) -> None:
    import socket

    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True).stdout.strip()
    lock_path(tree).write_text(
        f"pid {exited} on {socket.gethostname()} (dflash2-backport apply, since 00:00:00)\n"
    )
    holder = TreeLock(tree, "apply")
    _waiting = []
    descriptor = os.open(lock_path(tree), os.O_RDONLY)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        with pytest.raises(BackportError) as refused:
            holder.acquire(0.2, _waiting.append)
    finally:
        os.close(descriptor)
    assert f"pid {exited}" not in str(refused.value)
    assert "waiting for another dflash2-backport process" in _waiting[0]


#: The command line, with a signal that comes as the interpreter shuts down,
#: once Python has put the default handlers back.
LATE_SIGNAL = """
import atexit, os, signal, sys

def late():
    signal.signal(signal.{name}, signal.SIG_DFL)
    os.kill(os.getpid(), signal.{name})

atexit.register(late)
sys.argv = ["dflash2-backport", "check", "--root", sys.argv[1]]
from dflash2_backport.__main__ import main
main()
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_after_the_command_has_its_result_leaves_its_exit_status(
    tmp_path: Path, name: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LATE_SIGNAL.format(name=name), str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr  # the command's own: no such tree
    assert len(done.stderr.splitlines()) == 1


#: The console script pip writes for the command, with a signal where it
#: has imported the tool but not yet called it: its own first line, `import
#: re`, is the interpreter's part of the start-up; the tool's begins here.
CONSOLE_SCRIPT = """
import re
import sys
import os, signal
sys.argv = ["dflash2-backport", *sys.argv[1:]]
from dflash2_backport.__main__ import main
os.kill(os.getpid(), signal.{name})
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_signal_as_soon_as_the_console_script_has_imported_the_tool_stops_with_one_line(
    tmp_path: Path, name: str, as_json: bool
) -> None:
    args = ["apply", "--root", str(tmp_path), *(["--json"] if as_json else [])]
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT.format(name=name), *args],
        capture_output=True, text=True, timeout=60,
    )
    message = f"interrupted by {name}; nothing was written"
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    if as_json:
        document = json.loads(done.stdout)
        assert (document["command"], document["action"], document["message"]) == (
            "apply", "interrupted", message)
    else:
        assert done.stderr.splitlines() == [f"dflash2-backport: {message}"]


# (vllm/'s mode, the mode of a lock file left there before, the lock file's
# mode while held): only those who may write vllm/ may open it.
LOCK_MODES = [
    (0o755, None, 0o600),
    (0o775, None, 0o660),
    (0o2775, None, 0o660),
    (0o777, None, 0o666),
    (0o755, 0o644, 0o600),  # left by a killed run of an earlier version
    (0o775, 0o666, 0o660),
    (0o755, 0o444, 0o400),  # made read-only on purpose: kept so, narrowed
]


@pytest.mark.parametrize("directory, left, held", LOCK_MODES)
def test_only_those_who_may_write_the_tree_may_open_its_lock_file(
    tree: Path, directory: int, left: int | None, held: int
) -> None:
    (tree / "vllm").chmod(directory)
    if left is not None:
        lock_path(tree).write_text("")
        lock_path(tree).chmod(left)
    lock = TreeLock(tree, "apply")
    lock.acquire(1, lambda _: None)
    try:
        assert oct(lock_path(tree).stat().st_mode & 0o7777) == oct(held)
    finally:
        lock.release()
