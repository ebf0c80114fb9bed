"""Helpers for code that runs inside a runtime-test venv, not inside pytest.

The runner (tests/runtime/conftest.py) puts this directory on PYTHONPATH of
every interpreter it starts, so a snippet can `from runtime_guest import ...`.
Nothing here may import vLLM at module level: some helpers must run before
vLLM (and triton) are first imported.
"""

from __future__ import annotations

import json
import os
import traceback
from contextlib import contextmanager
from typing import Any, Callable


def emit(result: Any) -> None:
    """Hand `result` back to the test. vLLM logs to stdout and stderr, so the
    result goes through a file the runner names instead."""
    with open(os.environ["RUNTIME_RESULT"], "w") as out:
        json.dump(result, out)


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def attempt(fn: Callable[[], Any]) -> dict:
    """{"ok": True, "value": ...} or {"ok": False, "error": "Type: message"}.

    For a probe whose failure on one venv is the expected observation rather
    than a broken harness.
    """
    try:
        return {"ok": True, "value": fn()}
    except Exception as error:  # noqa: BLE001 -- the failure is the observation
        return {
            "ok": False,
            "error": describe(error),
            "traceback": traceback.format_exc(limit=-4),
        }


def use_triton_interpreter() -> None:
    """Make `@triton.jit` kernels that use libdevice.log1p runnable on CPU.

    The interpreter leaves libdevice functions as stubs returning None, and
    the fp32 Gumbel transform calls log1p. Must run before a kernel runs;
    needs TRITON_INTERPRET=1 in the environment before triton is imported.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("TRITON_INTERPRET=1 must be set before triton is imported")
    import numpy as np
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    from triton.runtime.interpreter import interpreter_builder

    def log1p(x, *args, **kwargs):
        return tl.core.tensor(interpreter_builder.unary_op(x.handle, np.log1p), x.type)

    libdevice.log1p = log1p


def stub_silu_and_mul() -> None:
    """Register `torch.ops._C.silu_and_mul`, which vLLM's compiled ops provide
    on GPU builds; building a Qwen3-style MLP on CPU needs it to exist."""
    import torch

    if hasattr(torch.ops._C, "silu_and_mul"):
        return
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("silu_and_mul(Tensor! result, Tensor input) -> ()")

    def silu_and_mul(result, x):
        d = x.shape[-1] // 2
        result.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])

    lib.impl("silu_and_mul", silu_and_mul, "CompositeExplicitAutograd")
    # Keep the library alive for the life of the interpreter.
    stub_silu_and_mul._lib = lib  # type: ignore[attr-defined]


@contextmanager
def distributed(vllm_config, world_size: int = 1, rank: int = 0, init_file: str | None = None):
    """vLLM's model-parallel groups over gloo, as vLLM's own CPU tests set them up.

    For world_size > 1 every rank runs this with the same `init_file`.
    """
    import tempfile

    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )

    if init_file is None:
        init_file = tempfile.mktemp(prefix="vllm-dist-")
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size, rank, f"file://{init_file}", rank, "gloo"
        )
        ensure_model_parallel_initialized(world_size, 1)
        try:
            yield
        finally:
            cleanup_dist_env_and_memory()
