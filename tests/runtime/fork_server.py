"""Snippets forked from a venv interpreter that has already imported torch
and vLLM (venv_side/snippet_server.py), instead of started fresh.

A fresh interpreter spends most of a short probe's time importing vLLM; a
fork of one that has done so starts at once, still in a process of its own
with nothing left over from any other snippet. The runner keeps a server
per venv interpreter and environment, started on first use; `ForkedProcess`
gives it what it uses of `subprocess.Popen`. Forking is asked for without
waiting for the server's imports, so that snippets of several venvs start
side by side as fresh ones do; where a server cannot serve (its imports
failed, say), the snippet is started fresh instead.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

SERVER = Path(__file__).resolve().parent / "venv_side" / "snippet_server.py"


class ForkedProcess:
    """A snippet asked of a server: poll, wait, kill, returncode and pid, as
    subprocess.Popen has them. If the server cannot fork it, it runs fresh
    (`start_fresh`) and this delegates to that Popen."""

    def __init__(self, server: ForkServer, token: int,
                 start_fresh: Callable[[], subprocess.Popen]):
        self.server = server
        self.token = token
        self.pid: int | None = None
        self._returncode: int | None = None
        self._start_fresh = start_fresh
        self.fresh: subprocess.Popen | None = None
        self.fresh_because: str | None = None
        # Set once the snippet has exited or been handed to a fresh process.
        self._settled = threading.Event()

    @property
    def returncode(self) -> int | None:
        return self.fresh.returncode if self.fresh else self._returncode

    def _started(self, pid: int) -> None:
        self.pid = pid

    def _exited(self, code: int) -> None:
        self._returncode = code
        self._settled.set()

    def _fall_back(self, why: str) -> None:
        self.fresh_because = why
        try:
            self.fresh = self._start_fresh()
        except BaseException:
            self._returncode = -1
            raise
        finally:
            self._settled.set()

    def poll(self) -> int | None:
        if self.fresh:
            return self.fresh.poll()
        return self._returncode

    def wait(self, timeout: float | None = None) -> int:
        began = time.monotonic()
        if not self._settled.wait(timeout):
            raise subprocess.TimeoutExpired(f"snippet {self.token}", timeout)
        if self.fresh:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - began))
            return self.fresh.wait(left)
        return self._returncode

    def kill(self) -> None:
        """Kill and wait for the end, as Popen.kill() then wait() do."""
        if self._settled.is_set():
            if self.fresh and self.fresh.poll() is None:
                self.fresh.kill()
                self.fresh.wait()
            return
        self.server.kill(self)
        self.wait()
        if self.fresh and self.fresh.poll() is None:
            self.fresh.kill()
            self.fresh.wait()


class ForkServer:
    """One venv interpreter with torch and vLLM imported, forking snippets."""

    def __init__(self, python: Path, environ: dict, log: Path):
        self.python = python
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        # Asked for and not yet exited (or handed to a fresh process).
        self._waiting: dict[int, ForkedProcess] = {}
        self.failure: str | None = None
        self._log = log
        with open(log, "w") as stderr:
            self.process = subprocess.Popen(
                [str(python), str(SERVER)], env=environ, cwd=log.parent,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def fork(self, script: Path, args: list[str], cwd: Path, environ: dict,
             log: Path, start_fresh: Callable[[], subprocess.Popen]) -> ForkedProcess:
        child = ForkedProcess(self, next(self._tokens), start_fresh)
        with self._lock:
            failure = self.failure
            if failure is None:
                self._waiting[child.token] = child
        if failure is not None:
            child._fall_back(failure)
            return child
        self._send({"id": child.token, "run": {
            "script": str(script), "args": args, "cwd": str(cwd), "env": environ,
            "log": str(log),
        }})
        return child

    def kill(self, child: ForkedProcess) -> None:
        self._send({"id": child.token, "kill": True})

    def _send(self, request: dict) -> None:
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            # The server is gone; its reader settles whatever was asked of it.
            pass

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            if "error" in message:
                # The imports failed: nothing will be forked.
                self._fail(message["error"])
                continue
            with self._lock:
                child = self._waiting.get(message.get("id"))
                if child is not None and "exited" in message:
                    del self._waiting[child.token]
            if child is None:
                continue
            if "started" in message:
                child._started(message["started"])
            elif "exited" in message:
                child._exited(message["code"])
            elif "refused" in message:
                with self._lock:
                    self._waiting.pop(child.token, None)
                child._fall_back(message["refused"])
        self.process.wait()
        self._fail(f"the fork server exited {self.process.returncode}:\n"
                   + self._log.read_text(errors="replace")[-3000:])

    def _fail(self, why: str) -> None:
        """No more forks from this server. What it forked and may still run
        is killed, since nothing would report its end; what it had not yet
        forked starts fresh."""
        with self._lock:
            if self.failure is None:
                self.failure = why
            waiting, self._waiting = self._waiting, {}
        for child in waiting.values():
            if child.pid is None:
                child._fall_back(why)
                continue
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child._exited(-signal.SIGKILL)

    def busy(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def close(self) -> None:
        """End the server; it kills any child still running."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=30)
