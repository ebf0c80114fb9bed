"""Fault injection for real `dflash2-backport` subprocesses, from the outside.

The shipped code has no fault switch. Instead, a `sitecustomize.py` on the
subprocess's PYTHONPATH wraps the `os` functions that replace, remove or
create paths, counts the calls that touch the target tree, and at the chosen
one acts before the call happens: kills the process, sends it a signal, or
edits a file as a user would. Each act is one line of Python run in the
subprocess, with the call's arguments and the real function at hand, so an
act may also make the call in part (a torn write) before it kills.

Besides the `os` functions by name, two more can be counted: `create`, the
calls of `os.open` that may create a file, and `write`, the calls of
`os.write` on a file in the tree. The hook itself is fault_hook.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.tool_server import Run, ToolServer

_HOOK = Path(__file__).with_name("fault_hook.py")

KILL = "os.kill(os.getpid(), signal.SIGKILL)"
#: At a counted `write`: half the bytes reach the file, then the kill.
TORN = "real(args[0], bytes(args[1])[: max(1, len(args[1]) // 2)]); " + KILL
#: Every call that creates, fills, replaces or removes something in the tree.
EVERY_WRITE = "create write replace rename unlink remove rmdir mkdir"


def signal_self(name: str) -> str:
    return f"os.kill(os.getpid(), signal.{name})"


def append_to(path: Path, text: str) -> str:
    return f"open({str(path)!r}, 'a').write({text!r})"


def install_hook(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_HOOK, directory / "sitecustomize.py")
    return directory


#: Where runs are forked from while `served_runs` is in effect.
_server: ToolServer | None = None


@contextlib.contextmanager
def served_runs() -> Iterator[None]:
    """Runs of the tool, meanwhile, forked from one process that has
    imported it (tool_server.py), except those about the imports."""
    global _server
    previous, _server = _server, ToolServer()
    try:
        yield
    finally:
        _server.close()
        _server = previous


def _served(fault: dict) -> bool:
    return _server is not None and not fault.get("on_import")


def run_tool(args: list[str], *, timeout: float = 120, **fault) -> subprocess.CompletedProcess:
    """Run `python -m dflash2_backport ARGS`, with the fault hook when given
    (the fault's keywords are `_environment`'s)."""
    if _served(fault):
        return _server.start(args, _environment(**fault), fault.get("hook")).completed(timeout)
    return subprocess.run(
        [sys.executable, "-m", "dflash2_backport", *args],
        capture_output=True,
        text=True,
        env=_environment(**fault),
        timeout=timeout,
    )


def start_tool(args: list[str], **fault) -> subprocess.Popen | Run:
    """`run_tool`, but started and left running: the caller waits for it."""
    if _served(fault):
        return _server.start(args, _environment(**fault), fault.get("hook"))
    return subprocess.Popen(
        [sys.executable, "-m", "dflash2_backport", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_environment(**fault),
    )


def _environment(
    hook: Path | None = None,
    root: Path | None = None,
    at: int = 0,
    act: str = KILL,
    match: str = "",
    log: Path | None = None,
    ops: str = "",
    env: dict | None = None,
    on_import: str = "",
    fork_at: str = "",
    control: str = "",
) -> dict:
    """The subprocess's environment: `env` (else this one's), with the hook
    on its path acting at call `at` of `ops` (those matching `match`) under
    `root`, or as `on_import` is imported, and logging to `log`; or serving
    the kills `control` asks for from its first counted call on a path
    ending in `fork_at` (forked_kills.py)."""
    environment = dict(os.environ if env is None else env)
    if on_import:
        environment["FAULT_ON_IMPORT"] = on_import
    if hook is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(hook), *filter(None, [environment.get("PYTHONPATH")])]
        )
        environment.update(
            FAULT_ROOT=str(root), FAULT_AT=str(at), FAULT_ACT=act, FAULT_MATCH=match
        )
        if log is not None:
            environment["FAULT_LOG"] = str(log)
        if ops:
            # Other calls to count (the opening of a file, say) instead of the writes.
            environment["FAULT_OPS"] = ops
        if fork_at:
            environment.update(FAULT_FORK_AT=fork_at, FAULT_CONTROL=control)
    return environment
