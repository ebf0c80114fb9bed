"""`dflash2-backport verify --gpu`: DFlash2 in vLLM's real engine, on this
machine's GPU, run in the interpreter that runs vLLM (gpu_probes.py says
what it checks).

Everything it writes (the small checkpoints, vLLM's compile cache, Triton's
compiled kernels, CUDA's, torch's, the temp files) goes to one temporary
directory, removed when it ends, whatever way it ends.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ..utils.errors import BackportError
from .verify import (
    _BOOTSTRAP,
    Verification,
    checks_of,
    environment_notes,
    run_probes,
    scratch_environment,
)

GPU_PROBES = Path(__file__).resolve().with_name("gpu_probes.py")
# The whole run, and the engines' share of it: both engines compile and
# capture CUDA graphs, about a minute on an H200; a user's checkpoints load
# for longer.
TIMEOUT = 900
ENGINE_TIMEOUT = 840
def hint(options: tuple[str, ...] = ()) -> str:
    """What to do when a check fails, with the options that named the vLLM."""
    import shlex

    return (f"`{shlex.join(['dflash2-backport', 'verify', *options])}` (on the CPU) and "
            f"`{shlex.join(['dflash2-backport', 'check', *options])}` say whether the "
            "backport is in place")


HINT = hint()


def checkpoint_dir(path: Path, option: str) -> Path:
    """A model directory the user named, as an absolute path (the probe runs
    elsewhere), or one line saying what is wrong with it."""
    path = path.expanduser()
    if not (path / "config.json").is_file():
        raise BackportError(f"{option} {path}: not a model directory (no config.json)")
    return path.resolve()


def run_gpu(python: str, target: Path | None = None, draft: Path | None = None,
            attention_backend: str | None = None, dtype: str | None = None,
            timeout: float = TIMEOUT) -> Verification:
    """Both engines in `python`, in `dtype` (None: bfloat16 on the small
    checkpoints, the dtype a user's target declares)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dflash2-backport-verify-gpu-") as name:
        scratch = Path(name)
        request = scratch / "request.json"
        request.write_text(json.dumps({
            "scratch": str(scratch),
            "target": str(target) if target else None,
            "draft": str(draft) if draft else None,
            "attention_backend": attention_backend,
            "dtype": dtype,
            "bootstrap": _BOOTSTRAP,
            "engine_timeout": min(ENGINE_TIMEOUT, timeout - 30),
        }))
        document = run_probes(python, GPU_PROBES, [str(request)], scratch,
                              scratch_environment(scratch), timeout)
    models = document["models"]
    if models["synthetic"]:
        what = ("a small Qwen3 target and DFlash2 draft, written to a temporary "
                f"directory in {models['written_s']:.1f} s")
    else:
        what = f"target {models['target']}, draft {models['draft']}"
    return Verification(
        checks=checks_of(document),
        vllm_version=document["vllm"]["version"],
        vllm_package=document["vllm"]["package"],
        seconds=round(time.monotonic() - started, 1),
        context=(f"on {document['gpu']}, {document['dtype']}: {what}; "
                 f"{models['prompts']} prompts of token ids, "
                 f"{models['num_speculative_tokens']} draft tokens per step"),
        hint=HINT,
        notes=environment_notes(),
        facts={"gpu": document["gpu"], "dtype": document["dtype"],
               "attention": document.get("attention")},
    )
