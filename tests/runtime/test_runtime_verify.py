"""`dflash2-backport verify` where users run it: it fails on vLLM as it ships,
naming what is missing, and passes once `apply` ran.

The venvs are built as users build theirs (env.py): pip installs torch, vLLM
and the tool, and the tool's own console script applies the backport. None
holds a platform plugin or anything else of the test harness, and verify runs
in them with the environment a user's shell has. vLLM then resolves no usable
platform at all on these machines (no GPU), which is what `verify` has to
cope with: on torch's CPU build (0.27.1 and 0.27.0) and on its CUDA build
with no GPU visible (0.27.1), the `docker build` case.

The command runs as users run it: the console script of this checkout's venv
(the tool) pointed with --python at a venv that has vLLM (not the tool's),
and the patched venv's own console script with no option at all. Wall times
are printed, not judged (`make bench-verify` measures them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime import env as runtime_env

pytestmark = pytest.mark.runtime

CHECKS = ["registry", "causality", "v2-runner", "speculator", "top-k", "kernels"]
# What an unpatched vLLM lacks, as each failing line must name it.
MISSING = {
    "registry": ["DFlash2DraftModel"],
    "causality": ["DFlash2DraftModel"],
    "v2-runner": ["DFlash2DraftModel"],
    "speculator": ["DFlash2DraftModel"],
    "top-k": ["get_top_k_tokens"],
    "kernels": ["gumbel_noised_argmax", "qwen3_dflash2", "spec_decode.dflash2"],
}

TOOL = Path(sys.executable).with_name("dflash2-backport")

# (torch build, vLLM release): every release on torch's CPU build (0.26.0,
# whose torch PyPI serves only as its CUDA build, on that), and the CUDA
# build of torch on a machine that shows no GPU.
CASES = [(runtime_env.torch_build(version), version) for version in runtime_env.VLLM_VERSIONS] + [
    ("cuda", version) for version in runtime_env.CUDA_VLLM_VERSIONS
]


def user_environment(tmp_path: Path, **extra: str) -> dict:
    """A user's shell: nothing of pytest's interpreter, of vLLM's settings or
    of a GPU selection; TMPDIR private, so that what is left there shows."""
    environ = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("VLLM_", "PYTHON", "VIRTUAL_ENV", "CUDA_", "TRITON_",
                             "TORCHINDUCTOR_"))
    }
    environ["TMPDIR"] = str(tmp_path)
    environ.update(extra)
    return environ


def run_verify(command: list, tmp_path: Path, **extra: str):
    started = time.monotonic()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                          env=user_environment(tmp_path, **extra),
                          stdin=subprocess.DEVNULL, timeout=600)
    return done, time.monotonic() - started


def check_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """name -> (pass/FAIL, detail) from the human output."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in ("pass", "FAIL") and line.startswith("  "):
            found[parts[1]] = (parts[0], parts[2])
    return found


@pytest.fixture(params=CASES, ids=[f"{t}-torch-{v}" for t, v in CASES], scope="module")
def case(request) -> tuple[str, str]:
    return request.param


@pytest.fixture(scope="module")
def pair(versioned_venvs, case) -> dict[str, Path]:
    torch, version = case
    return versioned_venvs(version, torch)


SEEN_BY_A_PLAIN_INTERPRETER = """
import json, torch
from importlib.metadata import entry_points
import vllm
from vllm.platforms import current_platform
print(json.dumps({
    "platform_plugins": [e.name for e in entry_points(group="vllm.platform_plugins")],
    # vLLM ships general plugins of its own (LoRA resolvers); any other is not.
    "general_plugins": [e.name for e in entry_points(group="vllm.general_plugins")
                        if e.dist.name != "vllm"],
    "torch": torch.__version__, "cuda_build": torch.version.cuda,
    "gpu": torch.cuda.is_available(), "platform": type(current_platform).__name__,
}))
"""


def test_the_venvs_hold_no_plugin_and_vllm_finds_no_platform(pair, case, tmp_path):
    """What verify runs into: nothing chooses a platform for vLLM, and
    `import vllm` settles on UnspecifiedPlatform by itself."""
    torch_build, _ = case
    for name, venv in pair.items():
        done = subprocess.run(
            [runtime_env.venv_python(venv), "-c", SEEN_BY_A_PLAIN_INTERPRETER],
            capture_output=True, text=True, env=user_environment(tmp_path),
            stdin=subprocess.DEVNULL, timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.splitlines()[-1])
        print(f"\n{name}: {seen}")
        assert seen["platform_plugins"] == [] and seen["general_plugins"] == []
        assert seen["gpu"] is False
        assert (seen["cuda_build"] is not None) == (torch_build == "cuda"), seen
        assert seen["platform"] == "UnspecifiedPlatform"


def test_verify_names_every_missing_piece_on_vllm_as_it_ships(pair, case, tmp_path):
    pristine = runtime_env.venv_python(pair["pristine"])
    done, wall = run_verify([TOOL, "verify", "--python", pristine], tmp_path)
    print(f"\n$ dflash2-backport verify --python <pristine {case}>  ({wall:.1f} s)\n"
          f"{done.stdout}{done.stderr}")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = check_lines(done.stdout)
    assert list(lines) == CHECKS
    for name, needles in MISSING.items():
        state, detail = lines[name]
        assert state == "FAIL"
        for needle in needles:
            assert needle in detail, (name, detail)
    assert done.stdout.splitlines()[-1].startswith("failed: 6 of 6 checks")
    assert "Traceback" not in done.stdout + done.stderr


# The case whose run of verify on the patched venv is also watched for what
# it leaves behind: 0.27.1 on torch's CPU build, with its base venv.
WATCHED_CASE = ("cpu", "0.27.1")


@pytest.fixture(scope="module")
def patched_verify(tmp_path_factory):
    """`verify --python` on a case's patched venv, run once per case with a
    TMPDIR of its own: test_verify_passes_after_apply judges its output and
    test_verify_leaves_nothing_behind what it left (WATCHED_CASE), the same
    command in the same environment either would run."""
    runs: dict[tuple[str, str], dict] = {}

    def run(case: tuple[str, str], patched: Path) -> dict:
        if case not in runs:
            watched = (patched, runtime_env.base_env()) if case == WATCHED_CASE else ()
            before = {venv: _files(venv) for venv in watched}
            scratch = tmp_path_factory.mktemp("verify-tmp")
            done, wall = run_verify(
                [TOOL, "verify", "--python", runtime_env.venv_python(patched)], scratch
            )
            runs[case] = {
                "done": done, "wall": wall, "left_in_tmp": list(scratch.iterdir()),
                "venvs": {venv: (files, _files(venv)) for venv, files in before.items()},
            }
        return runs[case]

    return run


def test_verify_passes_after_apply(pair, case, patched_verify):
    _, version = case
    seen = patched_verify(case, pair["patched"])
    done, wall = seen["done"], seen["wall"]
    print(f"\n$ dflash2-backport verify --python <patched {case}>  ({wall:.1f} s)\n"
          f"{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(f"vLLM {version} at ")
    lines = check_lines(done.stdout)
    assert lines == {name: ("pass", lines[name][1]) for name in CHECKS}
    assert done.stdout.splitlines()[-1].startswith("verified: 6 of 6 checks pass")


def test_verify_json_from_the_vllm_venvs_own_console_script(pair, case, tmp_path):
    """No --python: the interpreter running the tool is the one verified."""
    _, version = case
    venv = pair["patched"]
    done, _ = run_verify([venv / "bin" / "dflash2-backport", "verify", "--json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["passed"] is True
    assert document["vllm_version"] == version
    assert Path(document["vllm_package"]).resolve() == (
        runtime_env.site_packages(venv.resolve()) / "vllm"
    )
    assert [c["name"] for c in document["checks"] if c["ok"]] == CHECKS


def _files(venv: Path) -> set[str]:
    """Every path in a venv, bytecode caches aside: the other tests'
    interpreters, which share the venv, write those on a first import
    (verify's probes write none: test_verify_command.py)."""
    root = venv.resolve()
    return {
        str(path.relative_to(root)) for path in root.rglob("*")
        if "__pycache__" not in path.parts
    }


def test_verify_leaves_nothing_behind(versioned_venvs, patched_verify):
    """Not in the temporary directory, not in the venv: the platform plugin
    verify provides lives and dies with the probe process."""
    torch_build, version = WATCHED_CASE
    patched = versioned_venvs(version, torch_build)["patched"]
    seen = patched_verify(WATCHED_CASE, patched)
    done = seen["done"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen["left_in_tmp"] == []
    assert set(seen["venvs"]) == {patched, runtime_env.base_env()}
    for venv, (files, after) in seen["venvs"].items():
        assert after == files, venv
