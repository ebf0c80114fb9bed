"""Standard output and error that cannot fail the command.

A reader that has gone (`dflash2-backport check | head -1`), a full disk
(`> report.json` on it) or a closed descriptor (`>&-`) must not turn a
command that has already written the tree into a traceback and exit 1, which
`check`'s callers read as "pending". What the command did stands, with its
own exit code; what could not be printed is dropped, and one line on
standard error, where it still works, says that the report is missing. A
reader that has gone asked for no more, as `head` does: that is not said.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TextIO


class _Guarded:
    """A text stream whose writes never raise: the first failure is kept,
    and the descriptor is pointed at /dev/null so that the interpreter's last
    flush, at exit, goes through too."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            self._failed(error)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            self._failed(error)

    def _failed(self, error: OSError) -> None:
        if self.failure is None:
            self.failure = error
        try:
            sink = os.open(os.devnull, os.O_WRONLY)
            os.dup2(sink, self._stream.fileno())
            os.close(sink)
            self._stream.flush()  # what was buffered goes nowhere, quietly
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def guard() -> None:
    """From here on, printing cannot fail the command."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:  # started with the descriptor closed
            stream = open(os.devnull, "w", encoding="utf-8")
        if not isinstance(stream, _Guarded):
            setattr(sys, name, _Guarded(stream))


def report_lost() -> None:
    """One line on standard error if the report did not reach standard
    output."""
    stdout, stderr = sys.stdout, sys.stderr
    failure = getattr(stdout, "failure", None)
    if failure is None or failure.errno == errno.EPIPE:
        return
    stderr.write(
        f"dflash2-backport: the report could not be written to standard output "
        f"({failure.strerror or failure}); the command's exit status still says how it "
        "ended\n"
    )
    stderr.flush()
