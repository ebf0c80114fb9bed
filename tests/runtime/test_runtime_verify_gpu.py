"""`dflash2-backport verify --gpu` in the venvs users build (env.py).

Without a GPU, on torch's CPU build and on its CUDA build alike, it says so
in one line and exits 2, leaving nothing behind. With one (DFLASH2_GPU_PYTHON
names an interpreter that has vLLM, CUDA torch and a GPU), it runs the real
engine and every check passes; what it prints on a GPU is in docs/gpu.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.runtime import env as runtime_env
from tests.runtime.test_runtime_verify import TOOL, run_verify

pytestmark = pytest.mark.runtime

GPU_CHECKS = ["engine", "speculator", "lossless", "counters", "kernels"]


@pytest.mark.parametrize("torch_build, shown", [
    ("cpu", "torch 2.13.0+cpu, a CPU build"),
    ("cuda", "torch 2.13.0+cu130, CUDA 13.0"),
])
def test_verify_gpu_without_a_gpu_says_so_in_one_line(versioned_venvs, torch_build,
                                                      shown, tmp_path):
    patched = runtime_env.venv_python(versioned_venvs("0.27.1", torch_build)["patched"])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, _ = run_verify([TOOL, "verify", "--gpu", "--python", patched], scratch)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line == (
        f"dflash2-backport: error: {patched}: no CUDA GPU is visible ({shown}); "
        "`verify --gpu` needs one, plain `verify` runs on the CPU"
    )
    assert list(scratch.iterdir()) == []

    done, _ = run_verify([TOOL, "verify", "--gpu", "--json", "--python", patched], scratch)
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert document["passed"] is False
    assert "no CUDA GPU is visible" in document["error"]


@pytest.fixture(scope="module")
def gpu_python() -> str:
    python = os.environ.get("DFLASH2_GPU_PYTHON")
    if not python:
        pytest.skip("DFLASH2_GPU_PYTHON names no interpreter with vLLM and a GPU")
    probe = subprocess.run(
        [python, "-c", "import torch, vllm; print(torch.cuda.is_available())"],
        capture_output=True, text=True,
    )
    if probe.returncode != 0 or probe.stdout.strip().splitlines()[-1:] != ["True"]:
        pytest.skip(f"{python} has no vLLM with CUDA torch and a GPU")
    return python


@pytest.mark.gpu
def test_verify_gpu_passes_on_a_gpu_and_leaves_nothing(gpu_python, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, wall = run_verify([TOOL, "verify", "--gpu", "--python", gpu_python], scratch,
                            **{k: v for k, v in os.environ.items()
                               if k.startswith(("PYTHONPATH", "VLLM_", "CUDA_"))})
    print(f"\n$ dflash2-backport verify --gpu  ({wall:.1f} s)\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split(None, 2) for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [(state, name) for state, name, _ in lines] == [("pass", n) for n in GPU_CHECKS]
    assert list(Path(scratch).iterdir()) == []


# How vLLM learns what a model class supports, with its model-info cache
# empty, as verify --gpu starts it: by default in a second interpreter; in
# the engine's process once gpu_probes.inspect_models_in_process has run.
INSPECT = """
import dataclasses, importlib.util, os, subprocess, sys, tempfile
os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp()
from runtime_guest import emit
spec = importlib.util.spec_from_file_location("gpu_probes", sys.argv[1])
gpu_probes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_probes)
from vllm.model_executor.models.registry import ModelRegistry
interpreters = []
real_run = subprocess.run
def counted(command, *args, **kwargs):
    interpreters.append(command[0])
    return real_run(command, *args, **kwargs)
subprocess.run = counted
if sys.argv[2] == "in-process":
    gpu_probes.inspect_models_in_process()
found = {arch: dataclasses.asdict(ModelRegistry.models[arch].inspect_model_cls())
         for arch in ("Qwen3ForCausalLM", "DFlashDraftModel")}
emit({"interpreters": len(interpreters), "info": repr(found)})
"""
GPU_PROBES = Path(__file__).resolve().parents[2] / "dflash2_backport" / "verification" / "gpu_probes.py"


@pytest.mark.parametrize("release", ["0.27.1", "0.26.0"])
def test_the_engines_learn_what_a_model_supports_without_a_second_interpreter(
        snippets, versioned_venvs, release):
    python = runtime_env.venv_python(versioned_venvs(release)["pristine"])
    by_default, in_process = snippets.gather([
        snippets.start(python, INSPECT, args=[str(GPU_PROBES), how], fresh=True, timeout=300)
        for how in ("by-default", "in-process")])
    assert (by_default["interpreters"], in_process["interpreters"]) == (2, 0)
    assert in_process["info"] == by_default["info"]
