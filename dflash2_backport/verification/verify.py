"""`dflash2-backport verify`: run probes.py in the target interpreter and judge it.

The probes run in a fresh process of the interpreter that runs vLLM, as the
console script of that vLLM would, so what passes here is what a server
started from that interpreter gets. The process sees no GPU, no network and a
scratch vLLM cache: the answers must not depend on the machine, and verifying
must not leave anything behind.

vLLM settles its platform the first time anything asks, and `import vllm`
itself asks; on a machine without a GPU it settles on a platform on which
not even an empty VllmConfig builds. So the probe process gets vLLM's own way
of choosing one: a platform plugin, an entry point in `vllm.platform_plugins`,
written for this run into the scratch directory that is first on the probe's
PYTHONPATH and gone with it. Nothing is installed anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..utils import interrupts
from ..utils.errors import BackportError
from ..utils.style import paint

PROBES = Path(__file__).resolve().with_name("probes.py")
TIMEOUT = 300

# The plugin's name, also its module's and distribution's. VLLM_PLUGINS names
# it alone: a platform plugin the environment already has would otherwise
# make two, which vLLM refuses, and general plugins would change the answers.
PLATFORM_PLUGIN = "dflash2_backport_verify_cpu_platform"
PLATFORM_GROUP = "vllm.platform_plugins"
CPU_PLATFORM = "vllm.platforms.cpu.CpuPlatform"

# `-c` rather than the file itself: running a file puts its directory first on
# sys.path, and this package's module names (report, record, engine...) must
# not shadow anything vLLM imports.
_PARENT = "DFLASH2_BACKPORT_PROBE_PARENT"
_BOOTSTRAP = (
    # A command killed (SIGKILL) after starting the probe but before its
    # watcher would leave the probe running: the probe dies with its parent,
    # and ends at once if that has died already. The variable goes with the
    # check: the engines the probe starts are the watcher's to end. The
    # parent-death signal is set as engine/judge.py sets it for its workers,
    # written out here: the probe's interpreter need not have this package.
    "import os, runpy, signal, sys\n"
    f"parent = os.environ.pop({_PARENT!r}, None)\n"
    "if parent is not None:\n"
    "    if sys.platform.startswith('linux'):\n"
    "        try:\n"
    "            import ctypes\n"
    "            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))\n"
    "        except (OSError, AttributeError):\n"
    "            pass\n"
    "    if os.getppid() != int(parent):\n"
    "        os._exit(1)\n"
    # The probe starts with the stopping signals blocked (see run_probes) and
    # gives them back to itself and the engines it starts.
    f"signal.pthread_sigmask(signal.SIG_UNBLOCK, {tuple(map(int, interrupts.SIGNALS))})\n"
    "del sys.path[0]\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    # Wall time of what produced the check's evidence, where it was timed.
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class Verification:
    checks: list[Check]
    vllm_version: str | None
    vllm_package: str | None
    seconds: float
    # A line on what ran, under the header (the GPU and the checkpoints).
    context: str = ""
    # What to do when a check fails.
    hint: str = "run `dflash2-backport apply`, then verify again"
    # What the caller's environment had that the probes did not get.
    notes: tuple[str, ...] = ()
    # Figures of the run for --json beside the checks (the GPU run's dtype
    # and attention backends).
    facts: dict = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)


def hint(options: tuple[str, ...] = ()) -> str:
    """What to do when a check fails, with the options that named the vLLM."""
    import shlex

    return f"run `{shlex.join(['dflash2-backport', 'apply', *options])}`, then verify again"


def write_platform_plugin(directory: Path) -> Path:
    """A distribution importlib.metadata finds once `directory` is on the
    path: one module, and a dist-info naming its function as an entry point."""
    directory.mkdir()
    (directory / f"{PLATFORM_PLUGIN}.py").write_text(
        f"def cpu_platform():\n    return {CPU_PLATFORM!r}\n"
    )
    info = directory / f"{PLATFORM_PLUGIN}-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PLATFORM_PLUGIN}\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{PLATFORM_GROUP}]\n{PLATFORM_PLUGIN} = {PLATFORM_PLUGIN}:cpu_platform\n"
    )
    return directory


#: vLLM's settings passed on from the caller's environment: how much the
#: engines log changes no answer.
PASSED_ON = frozenset({"VLLM_LOGGING_LEVEL"})


def left_out(environ: dict[str, str] | None = None) -> list[str]:
    """vLLM's settings in the caller's environment that the probes do not
    get: they check vLLM as it runs by default, with the same answers on
    every machine (VLLM_USE_V2_MODEL_RUNNER, say, would fail a vLLM that is
    patched right)."""
    environ = os.environ if environ is None else environ
    return sorted(n for n in environ if n.startswith("VLLM_") and n not in PASSED_ON)


def environment_notes() -> tuple[str, ...]:
    names = left_out()
    if not names:
        return ()
    return (f"not passed on from this environment: {', '.join(names)}; the checks are of "
            "vLLM's defaults, and a server started with these settings may differ",)


def flashinfer_workspace() -> str:
    """Where FlashInfer keeps its JIT kernels for this user: its own setting,
    else the home directory, as vLLM's engines find it."""
    return os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")


def scratch_environment(scratch: Path) -> dict[str, str]:
    """The probe process's environment: the caller's, less vLLM's own
    settings (`left_out`), with every cache vLLM, torch, Triton and CUDA keep
    (in the home directory or the system temp dir by default), the home
    directory and the temp dir inside `scratch`, so that verifying leaves
    nothing behind but FlashInfer's kernels, built where vLLM builds them;
    no network."""
    dropped = set(left_out())
    environ = {name: value for name, value in os.environ.items() if name not in dropped}
    (scratch / "tmp").mkdir()
    (scratch / "home").mkdir()
    environ.update(
        # Libraries vLLM's engines import keep caches under the home
        # directory, each behind a variable of its own (humming-kernels'
        # ~/.humming, TileLang's ~/.tilelang, seen on a pip-made 0.27.1);
        # rather than chase every one, the home directory itself moves into
        # the scratch. The user's own site-packages (pip install --user),
        # found through it, stay where they are.
        HOME=str(scratch / "home"),
        PYTHONUSERBASE=site.getuserbase(),
        VLLM_CACHE_ROOT=str(scratch / "vllm-cache"),
        VLLM_CONFIG_ROOT=str(scratch / "vllm-config"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch / "torchinductor"),
        TRITON_CACHE_DIR=str(scratch / "triton"),
        TRITON_HOME=str(scratch / "triton-home"),
        CUDA_CACHE_PATH=str(scratch / "cuda-cache"),
        # FlashInfer's JIT kernels (the DFlash2 selector's top-k, vLLM's
        # sampler) stay where vLLM's own engines build and find them (under
        # the user's home, or FLASHINFER_WORKSPACE_BASE): the same kernels a
        # `vllm serve` needs, minutes of nvcc on a first start, built once
        # for both.
        FLASHINFER_WORKSPACE_BASE=flashinfer_workspace(),
        XDG_CACHE_HOME=str(scratch / "xdg-cache"),
        TMPDIR=str(scratch / "tmp"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_LOGGING_LEVEL=environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
        PYTHONUNBUFFERED="1",
        # Imports compile what has no bytecode yet (an install made with
        # --no-compile, a source tree): into memory, not into the user's tree.
        PYTHONDONTWRITEBYTECODE="1",
    )
    return environ


def probe_environment(scratch: Path, plugin: Path) -> dict[str, str]:
    environ = scratch_environment(scratch)
    path = [str(plugin)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    environ.update(
        PYTHONPATH=os.pathsep.join(path),
        VLLM_PLUGINS=PLATFORM_PLUGIN,
        # No GPU: vLLM then takes an importable Triton as usable (so the V2
        # model runner can be chosen) and the CPU platform is consistent.
        CUDA_VISIBLE_DEVICES="",
    )
    return environ


def run_probes(python: str, script: Path, args: list[str], scratch: Path,
               environ: dict[str, str], timeout: float) -> dict:
    """Run a probe file in `python`; the document it wrote to its result file.

    The probe and everything it starts (engines) form a process group of
    their own, ended as a whole once the probe has ended, on a timeout or an
    interrupt, so that no engine outlives the command or holds the scratch
    directory; and, should the command itself be killed (SIGKILL, the OOM
    killer), by a watcher that outlives it.
    """
    result_file = scratch / "result.json"
    log_file = scratch / "output.log"
    # A signal that lands once the probe runs but before the guard below
    # would leave its process group running: the signals wait, blocked,
    # until the guard is in place.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SIGNALS)
    process = watcher = None
    try:
        with open(log_file, "wb") as log:
            process = subprocess.Popen(
                [python, "-c", _BOOTSTRAP, str(script), *args, str(result_file)],
                cwd=scratch, env={**environ, _PARENT: str(os.getpid())},
                stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        watcher = _watch(process.pid)
    except BaseException as error:
        if process is not None:  # the watcher did not start: no probe runs unwatched
            _end_group(process)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if isinstance(error, OSError):
            raise BackportError(f"{python}: cannot run it ({error.strerror})") from None
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BackportError(
            f"{python}: the probes did not finish within {timeout:.0f} s, whether "
            "slow or stuck; run again on a less busy machine, and if it stops here "
            f"again, see that `{python} -c 'import vllm'` finishes"
        ) from None
    finally:
        _end_group(process)
        _dismiss(watcher)
    if process.returncode != 0 or not result_file.exists():
        raise BackportError(
            f"{python}: the probes crashed ({_last_error(log_file)}); "
            "see that the interpreter imports vllm and torch"
        )
    document = json.loads(result_file.read_text())
    if "error" in document:
        raise BackportError(f"{python}: {document['error']}")
    return document


# Runs with -S, apart from the user's site: it reads one byte from the
# command, which sends it once it has ended the probe's group itself; an end
# of file instead means the command died first, and the group goes with it.
_WATCHER = (
    "import os, signal, sys\n"
    "if not os.read(0, 1):\n"
    "    try:\n"
    "        os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
    "    except OSError:\n"
    "        pass\n"
)


def _watch(group: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-S", "-c", _WATCHER, str(group)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _dismiss(watcher: subprocess.Popen | None) -> None:
    if watcher is None:
        return
    try:
        watcher.stdin.write(b".")
        watcher.stdin.close()
    except OSError:
        pass  # it has gone already
    watcher.wait()


def _end_group(process: subprocess.Popen) -> None:
    """The probe's whole group: whatever it started and left running (an
    engine, a helper of an import) ends with it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass  # nothing left in it
    process.wait()


def checks_of(document: dict) -> list[Check]:
    return [Check(c["name"], bool(c["ok"]), c["detail"], c.get("seconds"))
            for c in document["checks"]]


def run(python: str, timeout: float = TIMEOUT) -> Verification:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dflash2-backport-verify-") as name:
        scratch = Path(name)
        plugin = write_platform_plugin(scratch / "platform-plugin")
        document = run_probes(python, PROBES, [], scratch,
                              probe_environment(scratch, plugin), timeout)
    return Verification(
        checks=checks_of(document),
        vllm_version=document["vllm"]["version"],
        vllm_package=document["vllm"]["package"],
        seconds=round(time.monotonic() - started, 1),
        notes=environment_notes(),
    )


def _last_error(log_file: Path) -> str:
    lines = [
        line for line in log_file.read_text(errors="replace").splitlines() if line.strip()
    ]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[-1].strip()


def render(verification: Verification, python: str, as_json: bool) -> int:
    """Print the result; the exit code: 0 when every check passes, else 2."""
    code = 0 if verification.passed else 2
    if as_json:
        json.dump(
            {
                "command": "verify",
                "python": python,
                "vllm_version": verification.vllm_version,
                "vllm_package": verification.vllm_package,
                "passed": verification.passed,
                "seconds": verification.seconds,
                **({"context": verification.context} if verification.context else {}),
                **verification.facts,
                **({"notes": list(verification.notes)} if verification.notes else {}),
                "checks": [
                    {k: v for k, v in dataclasses.asdict(c).items()
                     if v is not None or k != "seconds"}
                    for c in verification.checks
                ],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return code
    print(f"vLLM {verification.vllm_version} at {verification.vllm_package} ({python})")
    if verification.context:
        print(verification.context)
    width = max(len(c.name) for c in verification.checks)
    for check in verification.checks:
        state = paint("pass" if check.ok else "FAIL", sys.stdout, 4)
        timed = f" ({check.seconds:.1f} s)" if check.seconds is not None else ""
        print(f"  {state}  {check.name:<{width}}  {check.detail}{timed}")
    for note in verification.notes:
        print(f"  note: {note}")
    failed = [c.name for c in verification.checks if not c.ok]
    if failed:
        print(
            f"failed: {len(failed)} of {len(verification.checks)} checks "
            f"({', '.join(failed)}) in {verification.seconds:.0f} s; {verification.hint}"
        )
    else:
        print(
            f"verified: {len(verification.checks)} of {len(verification.checks)} "
            f"checks pass in {verification.seconds:.0f} s"
        )
    return code
