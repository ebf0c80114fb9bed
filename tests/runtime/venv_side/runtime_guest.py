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


def use_triton_interpreter(shortcuts: bool = True) -> None:
    """Make `@triton.jit` kernels that use libdevice.log1p runnable on CPU,
    and (`shortcuts`) faster in the interpreter (_speed_up_interpreter).

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
    index_scalars_as_numpy_allows()
    if shortcuts:
        _speed_up_interpreter()


#: What 0.27.0 added to `prepare_dflash_inputs` to copy the request's
#: sampling state in the kernel; 0.26.0 copies it on the host.
SAMPLING_STATE_ARGUMENTS = {"temperature", "seeds", "input_temperature", "input_seeds"}


def prepare_dflash_inputs(**arguments: Any) -> None:
    """vLLM's DFlash prepare-inputs launcher, called by parameter name with
    0.27.x's arguments; on 0.26.0 without the sampling-state copy's four."""
    import inspect

    from vllm.v1.worker.gpu.spec_decode.dflash import speculator

    accepted = inspect.signature(speculator.prepare_dflash_inputs).parameters
    unknown = set(arguments) - set(accepted)
    assert unknown <= SAMPLING_STATE_ARGUMENTS, unknown
    speculator.prepare_dflash_inputs(**{k: v for k, v in arguments.items() if k in accepted})


def index_scalars_as_numpy_allows() -> None:
    """Let Triton 3.6's interpreter (vLLM 0.26.0's pin) use a scalar tensor
    as an index, e.g. a `range` bound, with NumPy 2.4.

    The interpreter holds a scalar in a one-element array and indexes with
    `int(array)`, which NumPy 2.4 refuses for an array that is not 0-d;
    Triton 3.8 squeezes the array first, as this does. Harmless there. The
    interpreter is the tests' stand-in for a GPU, which compiles the kernel
    instead, so this is nothing a user of 0.26.0 runs into.
    """
    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor
    if getattr(patch, "squeezes_indices", False):
        return

    def patch_lang_tensor(tensor, scope) -> None:
        patch(tensor, scope)
        # Set after the interpreter's own, so the scope restores both in turn.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.squeezes_indices = True
    interpreter._patch_lang_tensor = patch_lang_tensor


# The interpreter releases the shortcuts below were read against (3.8, and
# 3.6, vLLM 0.26.0's, whose interpreter has the same structure there);
# another one runs as it ships.
_SHORTCUTS_TRITON = ("3.8.", "3.6.")


def _speed_up_interpreter() -> None:
    """The same kernels, the same values, in about a third of the time (the
    chi-square probes' sampling kernels: 16.3 s of CPU for 150 requests of
    test_runtime_step_seed.py's probe without, 5.5 s with)."""
    import triton
    from triton.runtime import interpreter

    if not triton.__version__.startswith(_SHORTCUTS_TRITON) or getattr(
        interpreter, "_sped_up", False
    ):
        return
    _patch_language_once_per_launch()
    _philox_rounds_in_numpy()
    _numpy_types_looked_up_once()
    interpreter._sped_up = True


def _patch_language_once_per_launch() -> None:
    """Skip the interpreter's re-patching of triton.language at every call of
    a jitted helper inside a kernel launch.

    The launch has patched those modules already; each nested call patches
    them again (builtins it finds already replaced are skipped, the rest are
    set to equal replacements) and never restores, so repeating it changes
    nothing a kernel computes. It walks every member of triton.language on
    every helper call, though: about two fifths of a sampling kernel's time
    in the interpreter. A helper whose module sees a language module the
    launch has not patched yet (triton's own `tl.core` helpers) still gets
    the full patch, once per launch.
    """
    import inspect

    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    launch = interpreter.GridExecutor.__call__
    languages = (interpreter.tl, interpreter.tl.core)
    # The language modules patched so far in the launch under way, if any.
    patched: list[set[int]] = []

    class _Unchanged:
        def restore(self) -> None:
            pass

    def patch_lang_once(fn):
        if patched and len(patched[-1]) == len(languages):
            return _Unchanged()
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


def _philox_rounds_in_numpy() -> None:
    """Run the rounds of triton's Philox (`tl.randint`, `tl.rand`) as numpy
    array operations, not op by op through the interpreter.

    Each draw is ten rounds of six 32-bit operations on the counters; with
    the language patched once per launch, the interpreter spends about a
    third of a sampling kernel's time there.
    Numpy computes the same wrapping uint32 arithmetic the interpreter does
    for those operations (its umulhi included), on the same arrays, so the
    words are the same bit for bit (test_runtime_harness.py compares them
    with the interpreter's own). Counters of any other type or shape than
    the four alike, and keys that are not scalars, go through the
    interpreter as before.
    """
    import numpy as np
    import triton.language as tl
    from triton.language import random
    from triton.runtime.interpreter import InterpretedFunction, TensorHandle

    jitted = random.philox_impl
    if not isinstance(jitted, InterpretedFunction):
        return
    interpreted = jitted.rewriter.rewrite_ast()
    round_a, round_b = np.uint32(0xD2511F53), np.uint32(0xCD9E8D57)
    key_a, key_b = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)

    def umulhi(a, b):
        return ((a.astype(np.uint64) * b.astype(np.uint64)) >> 32).astype(np.uint32)

    def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=random.N_ROUNDS_DEFAULT):
        counters, keys = (c0, c1, c2, c3), (k0, k1)
        if not (
            all(isinstance(c, tl.tensor) and c.type == c0.type for c in counters)
            and c0.dtype == tl.uint32
            and all(isinstance(k, tl.tensor) and k.type == tl.uint32 for k in keys)
        ):
            return interpreted(c0, c1, c2, c3, k0, k1, n_rounds)
        c0, c1, c2, c3 = (c.handle.data for c in counters)
        k0, k1 = (k.handle.data for k in keys)
        with np.errstate(over="ignore"):
            for _ in range(tl.core._unwrap_if_constexpr(n_rounds)):
                _c0, _c2 = c0, c2
                c0 = umulhi(round_b, _c2) ^ c1 ^ k0
                c2 = umulhi(round_a, _c0) ^ c3 ^ k1
                c1 = round_b * _c2
                c3 = round_a * _c0
                k0 = k0 + key_a
                k1 = k1 + key_b
        return tuple(
            tl.tensor(TensorHandle(c.astype(np.uint32), tl.uint32), counters[0].type)
            for c in (c0, c1, c2, c3)
        )

    InterpretedFunction.rewritten_fn[jitted.fn] = philox_impl


def _numpy_types_looked_up_once() -> None:
    """Remember the interpreter's numpy type of each triton type: it builds a
    table of twenty types anew at every operation to look one up (a tenth of
    what the other shortcuts leave)."""
    from triton.runtime import interpreter

    look_up = interpreter._get_np_dtype
    known: dict = {}

    def numpy_type(tt_dtype):
        try:
            return known[tt_dtype]
        except KeyError:
            found = known[tt_dtype] = look_up(tt_dtype)
            return found
        except TypeError:
            # Pointer types do not hash; they are the table's first check.
            return look_up(tt_dtype)

    interpreter._get_np_dtype = numpy_type


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
