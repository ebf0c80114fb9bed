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
`os.write` on a file in the tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_HOOK = '''
import os, signal, sys

_root = os.environ["FAULT_ROOT"]
_at = int(os.environ["FAULT_AT"])
_act = os.environ["FAULT_ACT"]
_match = os.environ.get("FAULT_MATCH", "")
_count = [0]
_log = os.environ.get("FAULT_LOG")


def _where(descriptor):
    return os.readlink(f"/proc/self/fd/{descriptor}")


def _paths(name, args, kwargs):
    if name == "write":
        try:
            return [_where(args[0])]
        except OSError:
            return []
    if name == "create" and not args[1] & os.O_CREAT:
        return []
    # The tool acts through directory descriptors: name each path in full.
    names = [os.fspath(a) for a in args[:2] if isinstance(a, (str, os.PathLike))]
    descriptors = (
        [kwargs.get("dir_fd")] * 2 if "dir_fd" in kwargs
        else [kwargs.get("src_dir_fd"), kwargs.get("dst_dir_fd")]
    )
    return [
        os.path.join(_where(descriptor), name)
        if descriptor is not None and not os.path.isabs(name) else name
        for name, descriptor in zip(names, descriptors)
    ]


def _wrap(name):
    attribute = {"create": "open"}.get(name, name)
    real = getattr(os, attribute)

    def wrapped(*args, **kwargs):
        paths = _paths(name, args, kwargs)
        if paths and any(str(p).startswith(_root) for p in paths):
            if not _match or any(str(p).endswith(_match) for p in paths):
                _count[0] += 1
                if _log:
                    with open(_log, "a") as log:
                        log.write(f"{_count[0]} {name} {' '.join(paths)}\\n")
                if _count[0] == _at:
                    exec(_act, {"os": os, "signal": signal, "paths": paths, "root": _root,
                                "args": args, "real": real})
        return real(*args, **kwargs)

    setattr(os, attribute, wrapped)


for _name in os.environ.get("FAULT_OPS", "replace rename unlink remove rmdir mkdir").split():
    _wrap(_name)


def _log_fsync():
    # Logged in order with the writes, never counted as one.
    real = os.fsync

    def fsync(descriptor):
        result = real(descriptor)
        where = _where(descriptor if isinstance(descriptor, int) else descriptor.fileno())
        if _log and where.startswith(_root):
            with open(_log, "a") as log:
                log.write(f"- fsync {where}\\n")
        return result

    os.fsync = fsync


_log_fsync()


def _trip_on_import(module):
    # Acts as `module` is about to be imported, before any of it runs.
    import sys

    class Tripwire:
        def find_spec(self, name, path=None, target=None):
            if name == module:
                exec(_act, {"os": os, "signal": signal})
            return None

    sys.meta_path.insert(0, Tripwire())


if os.environ.get("FAULT_ON_IMPORT"):
    _trip_on_import(os.environ["FAULT_ON_IMPORT"])
'''

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
    (directory / "sitecustomize.py").write_text(_HOOK)
    return directory


def run_tool(args: list[str], *, timeout: float = 120, **fault) -> subprocess.CompletedProcess:
    """Run `python -m dflash2_backport ARGS`, with the fault hook when given
    (the fault's keywords are `_environment`'s)."""
    return subprocess.run(
        [sys.executable, "-m", "dflash2_backport", *args],
        capture_output=True,
        text=True,
        env=_environment(**fault),
        timeout=timeout,
    )


def start_tool(args: list[str], **fault) -> subprocess.Popen:
    """`run_tool`, but started and left running: the caller waits for it."""
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
) -> dict:
    """The subprocess's environment: `env` (else this one's), with the hook
    on its path acting at call `at` of `ops` (those matching `match`) under
    `root`, or as `on_import` is imported, and logging to `log`."""
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
    return environment
