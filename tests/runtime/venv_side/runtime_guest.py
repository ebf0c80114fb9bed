"""Helpers for code that runs inside a runtime-test venv, not inside pytest.

The runner (tests/runtime/conftest.py) puts this directory on PYTHONPATH of
every interpreter it starts, so a snippet can `from runtime_guest import ...`.
Nothing here may import vLLM at module level: some helpers must run before
vLLM (and triton) are first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

# The probes `dflash2-backport verify` runs, from the checkout: the pristine
# venv has no dflash2-backport installed, and the tests must judge the same
# code the command ships.
PROBES_FILE = (
    Path(__file__).resolve().parents[3] / "dflash2_backport" / "verification" / "probes.py"
)


def _load_probes():
    spec = importlib.util.spec_from_file_location("dflash2_probes", PROBES_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


probes = _load_probes()
attempt = probes.attempt
describe = probes.describe
distributed = probes.distributed


def emit(result: Any) -> None:
    """Hand `result` back to the test. vLLM logs to stdout and stderr, so the
    result goes through a file the runner names instead."""
    with open(os.environ["RUNTIME_RESULT"], "w") as out:
        json.dump(result, out)


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
    _patch_language_once_per_launch()


# The interpreter release whose `_patch_lang` the shortcut below was read
# against; another one runs as it ships.
_PATCH_ONCE_TRITON = "3.8."


def _patch_language_once_per_launch() -> None:
    """Skip the interpreter's re-patching of triton.language at every call of
    a jitted helper inside a kernel launch.

    The launch has patched those modules already; each nested call patches
    them again (builtins it finds already replaced are skipped, the rest are
    set to equal replacements) and never restores, so repeating it changes
    nothing a kernel computes. It walks every member of triton.language on
    every helper call, though: about two thirds of a sampling kernel's time
    in the interpreter. A helper whose module sees a language module the
    launch has not patched yet (triton's own `tl.core` helpers) still gets
    the full patch, once per launch.
    """
    import inspect

    import triton
    from triton.runtime import interpreter

    if not triton.__version__.startswith(_PATCH_ONCE_TRITON) or getattr(
        interpreter, "_patched_once_per_launch", False
    ):
        return
    patch_lang = interpreter._patch_lang
    launch = interpreter.GridExecutor.__call__
    languages = (interpreter.tl, interpreter.tl.core)
    # The language modules patched so far in the launch under way, if any.
    patched: list[set[int]] = []

    class _Unchanged:
        def restore(self) -> None:
            pass

    def patch_lang_once(fn):
        seen = {id(v) for v in fn.__globals__.values()
                if inspect.ismodule(v) and v in languages}
        if patched and seen <= patched[-1]:
            return _Unchanged()
        if patched:
            patched[-1].update(seen)
        return patch_lang(fn)

    def run_launch(self, *args, **kwargs):
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    interpreter._patch_lang = patch_lang_once
    interpreter.GridExecutor.__call__ = run_launch
    interpreter._patched_once_per_launch = True


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
