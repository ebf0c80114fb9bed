"""`python -m dflash2_backport`, and the `dflash2-backport` command.

A signal that arrives before the command has its own handlers stops the
run with one line: nothing has been written yet, and no lock taken; both
happen only once a command holds the handlers of `utils.interrupts`. So the
handlers go in first, before any module of the tool is imported: typer and
the tool's modules take a tenth of a second or more to load on a busy
machine, and a Ctrl-C there would otherwise print a KeyboardInterrupt
traceback. This module imports nothing the interpreter has not already
loaded (`_signal` is built in; `signal` itself pulls in `enum`), and
installs them as it is imported, not when `main` is called: the console
script pip writes imports this module, then compiles a regular expression
for `sys.argv[0]`, a few milliseconds on a busy machine, before it calls
`main`. The window left is the interpreter's own start-up and the console
script's first line, `import re`.
"""

import _signal
import os
import sys

_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _command_started() -> bool:
    # Looked up, not imported: the handler may run before that module
    # exists, or while it is half-imported.
    interrupts = sys.modules.get("dflash2_backport.utils.interrupts")
    return bool(getattr(interrupts, "started", lambda: False)())


def _stopped_before_start(signum: int, _frame: object) -> None:
    """Once a command has finished, a signal changes nothing: the process
    is on its way out with the command's own exit code."""
    if _command_started():
        return
    message = f"interrupted by {_NAMES[signum]}; nothing was written"
    arguments = sys.argv[1:]
    if "--json" in arguments:
        import json

        command = next((a for a in arguments if not a.startswith("-")), None)
        document = {"command": command, "action": "interrupted", "changed_files": [],
                    "message": message}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stderr.write(f"dflash2-backport: {message}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(2)


try:
    for _signum in _NAMES:
        _signal.signal(_signum, _stopped_before_start)
except ValueError:
    pass  # imported off the main thread: not the command line, which runs on it


def main() -> None:
    from .utils import interrupts, streams

    streams.guard()
    from .cli.main import main as run

    try:
        run()
    finally:
        streams.report_lost()
        interrupts.quiet_from_here()


if __name__ == "__main__":
    main()
