"""SIGINT, SIGTERM and SIGHUP: stop cleanly, but never in the middle of a commit.

Outside a commit a signal stops the command at once (nothing has been
written yet, or everything has). Inside one, it is held until the commit has
finished, which takes milliseconds, and acted on then.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from .errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_committed = False
#: A command has taken the handlers: from then on it reports a signal itself.
_started = False


def started() -> bool:
    """Whether a command has taken the handlers: from then on it reports a
    signal itself, and the command line's own first handlers (`__main__`)
    stand aside."""
    return _started


def _on_signal(signum: int, _frame: object) -> None:
    raise Interrupted(signum, after_commit=_committed)


def _main_thread() -> bool:
    # Signal handlers can only be set from the main thread.
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Stop on any of the three signals, with a message, for the length of
    one command; whoever ran it (a test runner, an embedding program) gets
    its own handlers back afterwards."""
    global _committed, _started
    _committed = False
    _started = True
    previous = {}
    if _main_thread():
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Block the three signals for a few system calls, so that none lands
    between creating something (the lock file) and recording that it must be
    removed. A signal that arrives meanwhile is acted on right after."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold the three signals for the length of a block that must not be
    broken off halfway, and act on the first of them once it is over.

    A handler that raises can land inside the block's own machinery: in a
    pool of worker processes, between taking a lock and letting go of it,
    the pool then waits forever for workers that ignore signals. The blocks
    held are short (a commit's renames, a second or two of rewriting), so a
    Ctrl-C waits for them instead."""
    caught: list[int] = []
    previous = {}
    if _main_thread():
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, lambda number, _: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # Reached only when the block finished: a failure raises its own error.
    if caught:
        raise Interrupted(caught[0], after_commit=_committed)


@contextlib.contextmanager
def held_during_commit() -> Iterator[None]:
    global _committed
    with held():
        yield
        _committed = True


def quiet_from_here() -> None:
    """The command has its result: a signal from now on must not turn it
    into a death by signal while the interpreter shuts down, when Python has
    put the default handlers back."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
