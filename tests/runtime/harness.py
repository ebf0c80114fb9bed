"""Running code in fresh interpreters of the runtime venvs.

Used through the fixtures in conftest.py; see its docstring.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from tests.runtime import env as runtime_env
from tests.runtime.fork_server import ForkedProcess, ForkServer

VENV_SIDE = Path(__file__).resolve().parent / "venv_side"
# vLLM's model-info cache per venv build, kept across pytest runs: a cold
# one costs a fresh interpreter importing vLLM (about ten seconds of CPU) for
# every model class a config names, in every run and xdist worker. A build
# never changes once published, and vLLM checks each entry against the hash
# of its model's module, so an entry holds what inspecting would find.
MODELINFOS = runtime_env.MODELINFOS

# A fresh interpreter spends 10-20 s importing vLLM and torch; the slowest
# probes take about a minute alone on two cores, more when runs overlap.
DEFAULT_TIMEOUT = 600

# Environment variables set afresh for every test (by pytest, and by
# tests/conftest.py for the tool's verdict cache). A fork server serves
# snippets whose environments differ only in these, since nothing it imports
# reads them; each snippet still gets its own values.
PER_TEST = {"PYTEST_CURRENT_TEST", "DFLASH2_BACKPORT_VERDICT_CACHE"}
# Fork servers one runner keeps: the venvs a test module uses at once.
MAX_SERVERS = 6


class SnippetError(AssertionError):
    pass


@dataclass
class Snippet:
    """A snippet started in a venv interpreter, not yet waited for."""

    python: Path
    process: subprocess.Popen | ForkedProcess
    result_file: Path
    log_file: Path
    deadline: float

    def result(self):
        try:
            self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise SnippetError(
                f"snippet in {self.python} timed out:\n{self._log()}"
            ) from None
        if self.process.returncode != 0:
            raise SnippetError(
                f"snippet in {self.python} exited {self.process.returncode}:\n"
                f"{self._log()}"
            )
        if not self.result_file.exists() or not self.result_file.stat().st_size:
            raise SnippetError(f"snippet in {self.python} emitted nothing:\n{self._log()}")
        return json.loads(self.result_file.read_text())

    def failed(self) -> bool:
        return self.process.poll() not in (None, 0)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def _log(self) -> str:
        return self.log_file.read_text(errors="replace")[-6000:]


def write_cpu_platform_plugin(directory: Path) -> Path:
    """venv_side/vllm_cpu_platform.py as a distribution with a
    `vllm.platform_plugins` entry point, in `directory`: importlib.metadata
    finds it once the directory is on PYTHONPATH. Only the interpreters the
    runner starts get it; the venvs themselves never hold it, so that a
    command run there plainly sees what users see."""
    info = directory / "vllm_cpu_platform-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu-platform\nVersion: 0.0.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[vllm.platform_plugins]\ncpu_tests = vllm_cpu_platform:cpu_platform\n"
    )
    return directory


def snippet_env(cache_root: Path, *, plugin_dir: Path | None = None,
                cpu_platform: bool = True, triton_interpret: bool = True,
                extra: dict | None = None) -> dict:
    """The environment of a snippet interpreter.

    CUDA_VISIBLE_DEVICES="" is what lets vLLM treat an importable triton as
    usable with no GPU driver; TRITON_INTERPRET=1 then runs `@triton.jit`
    kernels in triton's interpreter. VLLM_CACHE_ROOT keeps vLLM's model-info
    cache out of the home directory. With `cpu_platform`, the plugin in
    `plugin_dir` (write_cpu_platform_plugin) makes vLLM choose its CPU
    platform whatever imports it first.
    """
    environ = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("VLLM_", "TRITON_", "PYTHON", "VIRTUAL_ENV"))
    }
    environ.update(
        PYTHONPATH=os.pathsep.join(
            [str(VENV_SIDE)] + ([str(plugin_dir)] if cpu_platform and plugin_dir else [])
        ),
        PYTHONUNBUFFERED="1",
        CUDA_VISIBLE_DEVICES="",
        VLLM_CACHE_ROOT=str(cache_root),
        # torch and Triton would write under the system temp dir and ~/.triton.
        TORCHINDUCTOR_CACHE_DIR=str(cache_root / "torchinductor"),
        TRITON_CACHE_DIR=str(cache_root / "triton"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        # Two interpreters often run side by side on a small machine.
        OMP_NUM_THREADS="1",
    )
    if triton_interpret:
        environ["TRITON_INTERPRET"] = "1"
    if not cpu_platform:
        environ["VLLM_PLUGINS"] = "none"
    environ.update(extra or {})
    return environ


class SnippetRunner:
    """Starts snippets in interpreters of a venv.

    `start` returns at once so that probes of both venvs run side by side;
    `run` starts and waits. A snippet is forked from a server of that venv
    that has imported torch and vLLM already (fork_server.py): its own
    process, with nothing of any other snippet's, minus the imports' time.
    `fresh=True` starts a new interpreter instead, for a snippet that must
    see what imports do (or must not find vLLM imported before it).
    """

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.cache_root = workdir / "vllm-cache"
        self.cache_root.mkdir(parents=True, exist_ok=True)
        self.plugin_dir = write_cpu_platform_plugin(workdir / "cpu-platform-plugin")
        self._started: list[Snippet] = []
        self._servers: OrderedDict[tuple, ForkServer] = OrderedDict()
        self._server_logs = 0

    def start(self, python: Path, code: str, *, timeout: float = DEFAULT_TIMEOUT,
              args: list[str] | None = None, fresh: bool = False,
              **env_options) -> Snippet:
        scratch = Path(tempfile.mkdtemp(prefix="snippet-", dir=self.workdir))
        script = scratch / "snippet.py"
        script.write_text(textwrap.dedent(code))
        result_file = scratch / "result.json"
        log_file = scratch / "output.log"
        log_file.touch()
        environ = snippet_env(self.cache_root_for(python), plugin_dir=self.plugin_dir,
                              **env_options)
        server = None if fresh else self._server(python, environ)
        environ["RUNTIME_RESULT"] = str(result_file)
        argv = [str(python), str(script), *(args or [])]

        def start_fresh() -> subprocess.Popen:
            with open(log_file, "w") as log:
                return subprocess.Popen(
                    argv, cwd=scratch, env=environ, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )

        if server is None:
            process = start_fresh()
        else:
            process = server.fork(script, argv[2:], scratch, environ, log_file, start_fresh)
        snippet = Snippet(python, process, result_file, log_file,
                          time.monotonic() + timeout)
        self._started.append(snippet)
        return snippet

    def cache_root_for(self, python: Path) -> Path:
        """VLLM_CACHE_ROOT for snippets of `python`: this run's own, except
        that for a venv the runtime tests build, `modelinfos` is the one that
        venv's build keeps across runs (MODELINFOS). Each venv gets its own,
        since a model class's info can differ between trees whose module
        file is the same."""
        build = Path(python).parent.parent.resolve()
        if build.parent != runtime_env.ROOT.resolve():
            return self.cache_root
        root = self.cache_root / build.name
        if not root.is_dir():
            shared = MODELINFOS / build.name
            shared.mkdir(parents=True, exist_ok=True)
            root.mkdir(exist_ok=True)
            try:
                (root / "modelinfos").symlink_to(shared, target_is_directory=True)
            except FileExistsError:
                pass
        return root

    def _server(self, python: Path, environ: dict) -> ForkServer:
        # The server's imports ran in its environment: only snippets that
        # get the same (PER_TEST aside) are forked from it.
        key = (str(python), tuple(sorted(
            (name, "" if name in PER_TEST else value) for name, value in environ.items()
        )))
        if key in self._servers:
            self._servers.move_to_end(key)
            return self._servers[key]
        # Each holds about half a gigabyte; the least recently used idle one
        # makes room (a later snippet of its venv starts another).
        idle = [k for k, server in self._servers.items() if not server.busy()]
        if len(self._servers) >= MAX_SERVERS and idle:
            self._servers.pop(idle[0]).close()
        self._server_logs += 1
        log = self.workdir / "fork-servers" / f"{self._server_logs}.log"
        log.parent.mkdir(exist_ok=True)
        self._servers[key] = ForkServer(python, environ, log)
        return self._servers[key]

    def run(self, python: Path, code: str, **kwargs):
        return self.start(python, code, **kwargs).result()

    def run_many(self, jobs: list[tuple[Path, str]], **kwargs) -> list:
        """Run snippets side by side; results in the order of `jobs`."""
        return self.gather([self.start(python, code, **kwargs) for python, code in jobs])

    @staticmethod
    def gather(started: list[Snippet]) -> list:
        """Results of snippets started together, in order. The first failure
        ends the others: a peer of a dead tensor-parallel rank would otherwise
        wait in a collective until its timeout."""
        try:
            while True:
                alive = [s for s in started if s.process.poll() is None]
                if not alive or any(s.failed() for s in started):
                    break
                if time.monotonic() > min(s.deadline for s in alive):
                    break
                time.sleep(0.2)
            failed = [s for s in started if s.failed()]
            if failed:
                failed[0].result()
            return [s.result() for s in started]
        finally:
            for snippet in started:
                snippet.kill()

    def close(self) -> None:
        for snippet in self._started:
            snippet.kill()
        for server in self._servers.values():
            server.close()
