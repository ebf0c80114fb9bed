"""A venv interpreter that has imported torch and vLLM once and forks a child
per snippet (tests/runtime/fork_server.py starts it and speaks for it).

Each child runs its snippet as `python snippet.py ARGS` would: the script as
`__main__`, its directory first on sys.path, the environment and working
directory the request names, stdout and stderr in the snippet's log, and
stdin empty; it exits as that interpreter would. What the children do never
reaches this process: a fork copies it, and it runs nothing itself after
the imports (no torch op, so no thread pool to copy half-started).

Protocol, one JSON object per line, each naming the snippet by the `id`
the client gave it. Requests on stdin: {"id", "run": {"script", "args",
"cwd", "env", "log"}} -> {"id", "started": pid} or {"id", "refused": why};
{"id": ..., "kill": true}. Reports go on the descriptor stdout had at
start: {"ready": true} once the imports are done (or {"error": text}, and
the server ends), and {"id", "exited": pid, "code": N} (N minus the
signal's number when a signal ended it, as subprocess reports). Requests
sent during the imports wait in the pipe. End of stdin kills every child
still running and ends the server. Anything printed while importing goes
to stderr.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback

# What nearly every snippet imports first (vllm.config brings most of the
# rest of what a probe needs); the server pays for it once. The modules a
# probe examines are imported in the child, after whatever the probe puts in
# place first.
PRELOAD = ("torch", "vllm", "vllm.config")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _run_child(request: dict, closing: list[int]) -> None:
    """In the forked child: become `python script args` and exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for fd in closing:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    script = request["script"]
    sys.argv = [script, *request["args"]]
    sys.path[0] = os.path.dirname(script)
    # torch's and numpy's default generators are seeded from the system once
    # per process, at import, and unlike `random`'s not again in a forked
    # child: give each snippet seeds of its own, as a fresh interpreter has.
    sys.modules["torch"].random.default_generator.seed()
    sys.modules["numpy"].random.seed()
    code = 0
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    # What the interpreter does on the way out: wait for non-daemon
    # threads, run atexit handlers, flush.
    try:
        import atexit
        import threading

        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
        code = code or 1
    os._exit(code & 0xFF)


def main() -> None:
    # Reports go on a private copy of stdout; stdout itself joins stderr so
    # that import-time output cannot corrupt them.
    reports = os.dup(1)
    os.dup2(2, 1)

    def report(message: dict) -> None:
        os.write(reports, (json.dumps(message) + "\n").encode())

    try:
        for name in PRELOAD:
            __import__(name)
    except BaseException:
        report({"error": traceback.format_exc()})
        return
    if _threads() != 1:
        report({"error": f"{_threads()} threads after the imports: forking would copy them"})
        return
    report({"ready": True})

    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, object] = {}  # pid -> id
    pids: dict[object, int] = {}  # id -> pid, while it runs
    pending = b""
    while True:
        readable, _, _ = select.select([0, wakeup_r], [], [])
        if wakeup_r in readable:
            os.read(wakeup_r, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            token = children.pop(pid)
            del pids[token]
            report({"id": token, "exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            # Nothing to clean up that the kernel does not: skip the
            # seconds torch's and vLLM's exit handlers take.
            os._exit(0)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            token = request["id"]
            if "kill" in request:
                if token in pids:
                    os.kill(pids[token], signal.SIGKILL)
                continue
            if _threads() != 1:
                report({"id": token, "refused": f"{_threads()} threads in the server"})
                continue
            pid = os.fork()
            if pid == 0:
                _run_child(request["run"], [reports, wakeup_r, wakeup_w])
            children[pid] = token
            pids[token] = pid
            report({"id": token, "started": pid})


if __name__ == "__main__":
    main()
