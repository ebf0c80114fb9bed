"""`verify` when the probes cannot even start: one line, exit 2, no traceback.

Real vLLM (failing and passing) is in tests/runtime/test_runtime_verify.py;
here a stand-in `vllm` package breaks on import, quickly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dflash2_backport.utils import interrupts
from dflash2_backport.utils.errors import Interrupted
from dflash2_backport.verification import verify
from tests.vllm_tree.test_interpreter import TOOL, bare_venv, tool

BROKEN = "raise RuntimeError('this vllm is broken on purpose')\n"


@pytest.fixture
def broken_vllm(tmp_path: Path) -> Path:
    python, site = bare_venv(tmp_path / "venv")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text(BROKEN)
    return python


def test_probes_that_crash_give_one_line_naming_the_error(broken_vllm: Path) -> None:
    result = tool("verify", "--python", broken_vllm)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {broken_vllm}: the probes crashed")
    assert "RuntimeError: this vllm is broken on purpose" in line


def test_probes_that_crash_give_json_with_the_error(broken_vllm: Path) -> None:
    result = tool("verify", "--python", broken_vllm, "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert "this vllm is broken on purpose" in document["error"]


# -- verify --gpu's options, refused before anything runs ------------------------


def model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--target", "T", "--draft", "D"],
         "--target, --draft, --attention-backend and --dtype need --gpu"),
        (["--attention-backend", "TRITON_ATTN"], "need --gpu"),
        (["--dtype", "float32"], "need --gpu"),
        (["--gpu", "--target", "T"], "--target and --draft go together"),
        (["--gpu", "--draft", "D"], "--target and --draft go together"),
        (["--gpu", "--target", "missing", "--draft", "D"],
         "--target {tmp}/missing: not a model directory (no config.json)"),
        (["--gpu", "--target", "T", "--draft", "missing"],
         "--draft {tmp}/missing: not a model directory (no config.json)"),
    ],
)
def test_verify_gpu_options_that_cannot_work_are_one_line(broken_vllm, tmp_path,
                                                         arguments, message):
    """Refused before the interpreter is even asked: the broken vLLM would
    otherwise show up in the message."""
    model_dir(tmp_path / "T")
    model_dir(tmp_path / "D")
    arguments = [str(tmp_path / a) if a in ("T", "D", "missing") else a for a in arguments]
    result = tool("verify", "--python", broken_vllm, *arguments)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("dflash2-backport: error: ")
    assert message.format(tmp=tmp_path) in line
    assert "broken on purpose" not in line


# -- a signal while the probes run ------------------------------------------------

HANGS = "import time\ntime.sleep(120)\n"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _verify_with_probes_that_hang(tmp_path: Path, arguments: list[str]):
    """`verify` started on a vLLM and torch that hang on import, once its
    probe runs; and the temporary directory it works in."""
    python, site = bare_venv(tmp_path / "venv")
    for package in ("vllm", "torch"):
        (site / package).mkdir()
        (site / package / "__init__.py").write_text(HANGS)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONUSERBASE", "VIRTUAL_ENV")}
    environ["TMPDIR"] = str(scratch)
    process = subprocess.Popen([str(TOOL), "verify", "--python", str(python), *arguments],
                               env=environ, stdin=subprocess.DEVNULL, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # No clock here: the stand-in imports give up after two minutes, and the
    # tool then ends, which fails the wait instead of hanging it.
    while not _processes_mentioning(str(scratch)) or not list(scratch.glob("*/output.log")):
        assert process.poll() is None, "the tool ended before any probe started"
        time.sleep(0.1)
    return process, scratch


@pytest.mark.parametrize("arguments", [[], ["--gpu"]], ids=["cpu", "gpu"])
def test_a_signal_ends_the_probes_and_leaves_nothing(tmp_path, arguments):
    """The probe process (for --gpu, the one that would start the engines)
    hangs importing vLLM or torch; SIGTERM to the tool ends it, and the
    temporary directory goes with it."""
    process, scratch = _verify_with_probes_that_hang(tmp_path, arguments)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert out == ""
    assert err == "dflash2-backport: error: interrupted by SIGTERM; nothing was written\n"
    assert list(scratch.iterdir()) == []
    assert _processes_mentioning(str(scratch)) == []


@pytest.mark.parametrize("arguments", [[], ["--gpu"]], ids=["cpu", "gpu"])
def test_the_probes_end_with_a_command_killed_by_sigkill(tmp_path, arguments):
    """Killed where it cannot clean up (SIGKILL, the OOM killer), the command
    leaves no probe behind, not even one stuck importing vLLM with the
    stopping signals still blocked."""
    process, scratch = _verify_with_probes_that_hang(tmp_path, arguments)
    try:
        process.kill()
        process.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _processes_mentioning(str(scratch)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_mentioning(str(scratch)) == []
    finally:
        for pid in _processes_mentioning(str(scratch)):
            os.kill(pid, signal.SIGKILL)


# The probe's start, as run_probes makes it, by a command that is then
# killed before it could start the probe's watcher.
LAUNCHER = """
import os, subprocess, sys, time
bootstrap, script = sys.argv[1], sys.argv[2]
probe = subprocess.Popen([sys.executable, "-c", bootstrap, script],
                         env={**os.environ, "DFLASH2_BACKPORT_PROBE_PARENT": str(os.getpid())},
                         start_new_session=True)
print(probe.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_probe_dies_with_a_command_killed_before_its_watcher_started(tmp_path):
    started = tmp_path / "started"
    script = tmp_path / "probe.py"
    script.write_text(f"open({str(started)!r}, 'w').close()\nimport time\ntime.sleep(120)\n")
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, verify._BOOTSTRAP, str(script)],
        stdout=subprocess.PIPE, text=True)
    probe = int(launcher.stdout.readline())
    try:
        while not started.exists():
            assert _alive(probe), "the probe ended before it ran"
            time.sleep(0.05)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 20
        while _alive(probe) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(probe)
    finally:
        if _alive(probe):
            os.kill(probe, signal.SIGKILL)


def test_a_probe_whose_command_has_died_already_does_not_run(tmp_path):
    ran = tmp_path / "ran"
    script = tmp_path / "probe.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    # Started by this process, but told another started it: as if its
    # command had died and it had been handed to another parent.
    environ = {**os.environ, "DFLASH2_BACKPORT_PROBE_PARENT": str(os.getpid() + 1_000_000)}
    done = subprocess.run([sys.executable, "-c", verify._BOOTSTRAP, str(script)], env=environ)
    assert done.returncode == 1
    assert not ran.exists()


# A probe that starts a process, leaves it running and ends well.
LEAVES_A_CHILD = """
import json, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
json.dump({{}}, open(sys.argv[-1], "w"))
"""


def test_what_a_probe_leaves_running_ends_with_it(tmp_path):
    marker = f"left-behind-{tmp_path.name}"
    script = tmp_path / "probe.py"
    script.write_text(LEAVES_A_CHILD.format(marker=marker))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        verify.run_probes(sys.executable, script, [], scratch, dict(os.environ), 60)
        deadline = time.monotonic() + 10
        while _processes_mentioning(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_mentioning(marker) == []
    finally:
        for pid in _processes_mentioning(marker):
            os.kill(pid, signal.SIGKILL)


# (vLLM's settings in the caller's environment, those the probes do not get)
SETTINGS = [
    ({}, []),
    ({"VLLM_LOGGING_LEVEL": "DEBUG"}, []),
    ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, ["VLLM_USE_V2_MODEL_RUNNER"]),
    ({"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_ATTENTION_BACKEND": "FLASHINFER",
      "VLLM_LOGGING_LEVEL": "INFO"}, ["VLLM_ATTENTION_BACKEND", "VLLM_USE_V2_MODEL_RUNNER"]),
]


@pytest.mark.parametrize("settings, dropped", SETTINGS)
def test_the_probes_check_vllms_defaults_and_say_which_settings_they_left_out(
    tmp_path, monkeypatch, settings, dropped
):
    for name in [n for n in os.environ if n.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = verify.scratch_environment(scratch)
    for name in dropped:
        assert name not in environment
    if "VLLM_LOGGING_LEVEL" in settings:
        assert environment["VLLM_LOGGING_LEVEL"] == settings["VLLM_LOGGING_LEVEL"]
    notes = verify.environment_notes()
    assert notes == ((f"not passed on from this environment: {', '.join(dropped)}; the "
                      "checks are of vLLM's defaults, and a server started with these "
                      "settings may differ",) if dropped else ())


def test_the_probes_write_no_bytecode_into_the_tree_they_import(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as most users have it
    package = tmp_path / "tree" / "compiled_nowhere"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    script = tmp_path / "probe.py"
    script.write_text("import json, sys\nsys.path.insert(0, sys.argv[1])\n"
                      "import compiled_nowhere\njson.dump({}, open(sys.argv[-1], 'w'))\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = verify.scratch_environment(scratch)
    verify.run_probes(sys.executable, script, [str(tmp_path / "tree")], scratch,
                      environment, 60)
    assert not (package / "__pycache__").exists()


def test_the_probe_runs_with_no_stopping_signal_blocked(tmp_path):
    # run_probes blocks them while the probe starts; the probe, and every
    # engine it starts, must get them back.
    script = tmp_path / "probe.py"
    script.write_text("import json, signal, sys\n"
                      "blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])\n"
                      "json.dump({'blocked': sorted(map(int, blocked))}, open(sys.argv[-1], 'w'))\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    document = verify.run_probes(sys.executable, script, [], scratch, dict(os.environ), 60)
    assert set(document["blocked"]) & set(map(int, interrupts.SIGNALS)) == set()


def test_a_signal_that_lands_as_the_probe_starts_still_ends_it(tmp_path, monkeypatch):
    script = tmp_path / "probe.py"
    script.write_text("import time\ntime.sleep(120)\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    started = subprocess.Popen

    def start_then_signal(*args, **kwargs):
        process = started(*args, **kwargs)
        # To this thread, as the one-threaded tool gets it: a test worker has
        # other threads, which may take a signal sent to the process while
        # this one blocks it.
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return process

    monkeypatch.setattr(verify.subprocess, "Popen", start_then_signal)
    try:
        with pytest.raises(Interrupted), interrupts.stopping_on_signals():
            verify.run_probes(sys.executable, script, [], scratch, dict(os.environ), 60)
        assert _processes_mentioning(str(scratch)) == []
    finally:
        for pid in _processes_mentioning(str(scratch)):
            os.kill(pid, signal.SIGKILL)


# Where each library the engines load keeps its caches, unless told otherwise:
# every one must be sent into the scratch directory, which verify removes.
CACHE_LOCATIONS = [
    "VLLM_CACHE_ROOT",  # torch.compile artefacts, FlashInfer's autotune cache
    "VLLM_CONFIG_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TRITON_HOME",
    "CUDA_CACHE_PATH",  # the driver's PTX cache, ~/.nv by default
    "XDG_CACHE_HOME",  # Hugging Face, pip, and the rest that follow XDG
    "TMPDIR",
    "HOME",  # what keeps its cache under ~ itself: ~/.humming, ~/.tilelang
]


@pytest.mark.parametrize("name", CACHE_LOCATIONS)
def test_every_cache_the_engines_keep_goes_into_the_scratch_directory(tmp_path, name):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = verify.scratch_environment(scratch)
    assert Path(environment[name]).is_relative_to(scratch)


@pytest.mark.parametrize("given, expected", [
    ("{tmp}/flashinfer-here", "{tmp}/flashinfer-here"),
    (None, "{home}"),
])
def test_flashinfer_builds_its_kernels_where_vllms_engines_find_them(
        tmp_path, monkeypatch, given, expected):
    """Not in the scratch: the DFlash2 selector's top-k is minutes of nvcc on a
    first start, the same kernels `vllm serve` loads from there."""
    home = tmp_path / "home-of-the-user"
    monkeypatch.setenv("HOME", str(home))
    if given is None:
        monkeypatch.delenv("FLASHINFER_WORKSPACE_BASE", raising=False)
    else:
        monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", given.format(tmp=tmp_path))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = verify.scratch_environment(scratch)
    assert environment["FLASHINFER_WORKSPACE_BASE"] == expected.format(
        tmp=tmp_path, home=home)
    assert environment["HOME"] == str(scratch / "home")


# What a process run in the scratch environment sees: where a library that
# caches under the home directory writes, and where `pip install --user`
# packages are found.
HOME_PROBE = """
import json, os, site
print(json.dumps({
    "humming": os.path.expanduser("~/.humming/cache"),
    "tilelang": os.path.expanduser("~/.tilelang/cache"),
    "user_site": site.getusersitepackages(),
}))
"""


def test_caches_under_the_home_directory_land_in_the_scratch_and_user_site_stays(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = verify.scratch_environment(scratch)
    seen = json.loads(subprocess.run(
        [sys.executable, "-c", HOME_PROBE], env=environment, capture_output=True,
        text=True, check=True).stdout)
    assert Path(seen["humming"]).is_relative_to(scratch)
    assert Path(seen["tilelang"]).is_relative_to(scratch)
    outside = json.loads(subprocess.run(
        [sys.executable, "-c", HOME_PROBE], capture_output=True, text=True,
        check=True).stdout)
    assert seen["user_site"] == outside["user_site"]
