"""`python -m dflash2_backport`, forked from a process that has imported the tool.

A run of the tool spends a good part of its time starting the interpreter
and importing typer, libcst and its own modules. The fault tests start a
few hundred runs, and each needs a real process of its own, not the tool
called inside pytest's: so one server process imports the tool once, and
forks a child per run. The child takes the run's command line, environment,
working directory and output files, loads the fault hook where one is given
(as `sitecustomize` would), runs `dflash2_backport` as `-m` runs it, and
exits as the interpreter would. The server reports how it ended.

What a fresh interpreter does that a forked child does not: import the
tool, and pick a hash seed of its own. A test about the imports themselves
(a signal as they load) runs a fresh interpreter (`faults.run_tool` with
`on_import`).

Run as `python -m tests.tool_server ADDRESS`; `ToolServer` starts it.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Requests and replies are single datagrams, with the output files' descriptors.
_MESSAGE = 1 << 20


# -- the server ------------------------------------------------------------------


def _import_the_tool() -> None:
    import importlib
    import pkgutil

    import dflash2_backport
    import dflash2_backport.transforms

    # The edits are installed inside the tool but live at the repository's
    # top, so they are walked apart.
    for package in (dflash2_backport, dflash2_backport.transforms):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            # `-m` runs __main__ afresh in each run.
            if not module.name.endswith(".__main__"):
                importlib.import_module(module.name)
    # What a writing run loads late: its pool of rewriting processes.
    import concurrent.futures.process  # noqa: F401
    import multiprocessing  # noqa: F401

    import libcst  # noqa: F401


def serve(address: str) -> None:
    _import_the_tool()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    #: pidfd -> (pid, the connection that asked for the run)
    running: dict[int, tuple[int, socket.socket]] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                connection, _ = listener.accept()
                selector.register(connection, selectors.EVENT_READ)
            elif isinstance(key.fileobj, socket.socket):
                connection = key.fileobj
                selector.unregister(connection)
                message, descriptors, _, _ = socket.recv_fds(connection, _MESSAGE, 2)
                if not message:
                    connection.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(message), descriptors)
                for descriptor in descriptors:
                    os.close(descriptor)
                connection.send(json.dumps({"pid": pid}).encode())
                pidfd = os.pidfd_open(pid)
                running[pidfd] = (pid, connection)
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pidfd = key.fileobj
                selector.unregister(pidfd)
                pid, connection = running.pop(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    connection.send(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass  # the test stopped waiting
                connection.close()


def _child(request: dict, descriptors: list[int]) -> None:
    """The run, in the forked child: never returns."""
    code = 1
    try:
        # Nothing of the server's but the tool's modules goes with the run.
        for descriptor in _open_descriptors():
            if descriptor > 2 and descriptor not in descriptors:
                try:
                    os.close(descriptor)
                except OSError:
                    pass  # the listing's own
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.dup2(descriptors[0], 1)
        os.dup2(descriptors[1], 2)
        for descriptor in (stdin, *descriptors):
            os.close(descriptor)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request["hook"]:
            _load_hook(request["hook"])
        code = _run_module(request["args"])
    finally:
        os._exit(code)


def _open_descriptors() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/fd")]


def _load_hook(path: str) -> None:
    import types

    module = types.ModuleType("sitecustomize")
    module.__file__ = path
    sys.modules["sitecustomize"] = module
    exec(compile(Path(path).read_text(), path, "exec"), module.__dict__)


def _run_module(args: list[str]) -> int:
    """`python -m dflash2_backport ARGS`, to its exit status."""
    import atexit
    import runpy
    import traceback

    sys.argv = ["-m", *args]
    try:
        runpy.run_module("dflash2_backport", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except KeyboardInterrupt:
        # As the interpreter does: die of the signal.
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:  # noqa: BLE001 - printed, as the interpreter would
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    _flush()
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# -- the client ------------------------------------------------------------------


class ToolServer:
    """A server process of the tool, for runs from any thread of this one."""

    def __init__(self) -> None:
        self.address = f"dflash2-backport-tool-server-{os.getpid()}-{id(self)}"
        root = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.tool_server", self.address],
            cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the tool server did not start: {self.process.wait()}")

    def start(self, args: list[str], env: dict[str, str], hook: Path | None = None) -> Run:
        return Run(self.address, args, env, hook)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


class Run:
    """One run of the tool from the server: as much of `subprocess.Popen`
    as the tests use, its output read once it has ended."""

    def __init__(self, address: str, args: list[str], env: dict[str, str], hook: Path | None):
        self.args = args
        self.returncode: int | None = None
        self._stdout = tempfile.TemporaryFile()
        self._stderr = tempfile.TemporaryFile()
        self._output: tuple[str, str] | None = None
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._connection.connect("\0" + address)
        request = {"args": args, "env": env, "cwd": os.getcwd(),
                   "hook": str(hook / "sitecustomize.py") if hook else None}
        socket.send_fds(self._connection, [json.dumps(request).encode()],
                        [self._stdout.fileno(), self._stderr.fileno()])
        self.pid: int = json.loads(self._connection.recv(_MESSAGE))["pid"]

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._connection.settimeout(timeout)
            try:
                reply = self._connection.recv(_MESSAGE)
            except socket.timeout:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            self.returncode = json.loads(reply)["code"]
            self._connection.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                return self.wait(timeout=0.0001)
            except subprocess.TimeoutExpired:
                return None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        if self._output is None:
            self._output = (_read(self._stdout), _read(self._stderr))
        return self._output

    def completed(self, timeout: float) -> subprocess.CompletedProcess:
        """`subprocess.run`'s result, or its TimeoutExpired (the run killed)."""
        deadline = time.monotonic() + timeout
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait(max(1.0, deadline - time.monotonic() + 5))
            raise
        stdout, stderr = self.communicate()
        return subprocess.CompletedProcess(self.args, self.returncode, stdout, stderr)


def _read(file) -> str:  # type: ignore[no-untyped-def]
    file.seek(0)
    text = file.read().decode(errors="replace")
    file.close()
    return text


if __name__ == "__main__":
    serve(sys.argv[1])
