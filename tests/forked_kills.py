"""Many kills of one real run of the tool, each forked after its plan.

A sweep kills the same command on the same tree at each of its counted
calls. A killed run spends nearly all its second before the first of them
that follows its plan: starting the interpreter, importing, taking the
lock, recovering, planning. Those are the same for every kill of a sweep,
call for call and byte for byte, so one real run of the tool makes them
once, and at its first counted call on a path ending in `fork_at` forks one
child per kill (fault_hook._serve_kills): each child is that run going on
from there in the shipped code, with the lock the tool took, counting the
calls as a run of its own would, and killed at its own.

Before each fork the tree is put back as it stood at the fork, so every
child finds what the run found. Kills at calls before the fork (the lock's
creation) need runs of their own: `ForkedKills.first` says from which call
on this one serves.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

from tests.faults import EVERY_WRITE, start_tool

#: relative path -> (mode, the bytes of a file; None for a directory)
TreeState = dict[str, tuple[int, bytes | None]]


def tree_state(site: Path) -> TreeState:
    """Every directory and file under `site`, with its mode."""
    state: TreeState = {}
    for directory, directories, files in os.walk(site):
        for name in directories + files:
            path = Path(directory, name)
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                state[str(path.relative_to(site))] = (stat.S_IMODE(info.st_mode), None)
            elif stat.S_ISREG(info.st_mode):
                state[str(path.relative_to(site))] = (stat.S_IMODE(info.st_mode), path.read_bytes())
            else:
                raise AssertionError(f"{path}: neither a file nor a directory")
    return state


def put_back(site: Path, state: TreeState) -> None:
    """Make `site` hold exactly `state`, rewriting only what differs."""
    now = tree_state(site)
    for relative in sorted(now, reverse=True):  # what is inside a directory first
        if relative not in state or (now[relative][1] is None) != (state[relative][1] is None):
            if now[relative][1] is None:
                shutil.rmtree(site / relative)
            else:
                (site / relative).unlink()
            del now[relative]
    for relative, (mode, data) in sorted(state.items()):  # a directory before what it holds
        path = site / relative
        if data is None and relative not in now:
            path.mkdir()
        elif data is not None and (relative not in now or now[relative][1] != data):
            path.write_bytes(data)
        if relative not in now or now[relative][0] != mode:
            path.chmod(mode)


class ForkedKills:
    """`args` run once on `site` with the fault hook, serving kills from its
    first counted call on a path ending in `fork_at`."""

    def __init__(self, args: list[str], site: Path, hook: Path, fork_at: str, scratch: Path):
        self.site = site
        self.output = scratch / "killed.out"
        scratch.mkdir(parents=True, exist_ok=True)
        address = f"fault-kills-{os.getpid()}-{id(self)}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind("\0" + address)
        listener.listen(1)
        listener.settimeout(0.1)
        self.run = start_tool(args, hook=hook, root=site, act="", ops=EVERY_WRITE,
                              fork_at=fork_at, control="@" + address)
        try:
            self.control = self._accept(listener)
        finally:
            listener.close()
        self.control.settimeout(120)
        self.replies = self.control.makefile("r")
        line = self.replies.readline()
        if not line:
            stdout, stderr = self.run.communicate(timeout=60)
            raise AssertionError(f"the run never reached the fork: {stdout}{stderr}")
        ready = json.loads(line)
        #: The first call served here: the one on `fork_at`.
        self.first: int = ready["at"]
        #: What the run held open in the tree at the fork.
        self.held: list[str] = ready["held"]
        self.state = tree_state(site)

    def _accept(self, listener: socket.socket) -> socket.socket:
        for _ in range(1200):  # two minutes at most
            try:
                connection, _ = listener.accept()
                return connection
            except socket.timeout:
                if self.run.poll() is not None:
                    stdout, stderr = self.run.communicate()
                    raise AssertionError(f"the run never reached the fork: {stdout}{stderr}")
        self.run.kill()
        raise AssertionError("the run never reached the fork")

    def kill(self, at: int, act: str, log: Path | None = None) -> tuple[int, str]:
        """The run forked once more, on the tree as it stood at the fork, and
        acting at call `at` (logging its calls from the fork on to `log`):
        how it ended, and what it printed."""
        assert at >= self.first, (at, self.first)
        put_back(self.site, self.state)
        order = {"at": at, "act": act, "output": str(self.output),
                 "log": str(log) if log else None}
        self.control.sendall(json.dumps(order).encode() + b"\n")
        reply = self.replies.readline()
        if not reply:
            stdout, stderr = self.run.communicate(timeout=60)
            raise AssertionError(f"the forking run ended: {stdout}{stderr}")
        return json.loads(reply), self.output.read_text(errors="replace")

    def close(self) -> None:
        try:
            self.control.sendall(b"null\n")
        except OSError:
            pass
        self.replies.close()
        self.control.close()
        try:
            self.run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.run.kill()
            self.run.wait()

    def __enter__(self) -> ForkedKills:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
