"""Fault injection for real `dflash2-backport` subprocesses, from the outside.

The shipped code has no fault switch. Instead, a `sitecustomize.py` on the
subprocess's PYTHONPATH wraps the `os` functions that replace, remove or
create paths, counts the calls that touch the target tree, and at the chosen
one acts before the call happens: kills the process, sends it a signal, or
edits a file as a user would. Each act is one line of Python run in the
subprocess.
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


def _paths(args, kwargs):
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
    real = getattr(os, name)

    def wrapped(*args, **kwargs):
        paths = _paths(args, kwargs)
        if paths and any(str(p).startswith(_root) for p in paths):
            if not _match or any(str(p).endswith(_match) for p in paths):
                _count[0] += 1
                if _log:
                    with open(_log, "a") as log:
                        log.write(f"{_count[0]} {name} {' '.join(paths)}\\n")
                if _count[0] == _at:
                    exec(_act, {"os": os, "signal": signal, "paths": paths, "root": _root})
        return real(*args, **kwargs)

    setattr(os, name, wrapped)


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
'''

KILL = "os.kill(os.getpid(), signal.SIGKILL)"


def signal_self(name: str) -> str:
    return f"os.kill(os.getpid(), signal.{name})"


def append_to(path: Path, text: str) -> str:
    return f"open({str(path)!r}, 'a').write({text!r})"


def install_hook(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_HOOK)
    return directory


def run_tool(
    args: list[str],
    *,
    hook: Path | None = None,
    root: Path | None = None,
    at: int = 0,
    act: str = KILL,
    match: str = "",
    log: Path | None = None,
    ops: str = "",
    env: dict | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """Run `python -m dflash2_backport ARGS`, with the fault hook when given."""
    environment = dict(os.environ if env is None else env)
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
    return subprocess.run(
        [sys.executable, "-m", "dflash2_backport", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )
