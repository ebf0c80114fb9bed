"""The shortcuts runtime_guest takes in Triton's interpreter (triton.language
patched once per kernel launch, Philox's rounds in numpy, numpy types looked
up once) change what the kernels compute in no bit, in Triton 3.8 (vLLM
0.27.1's) and 3.6 (0.26.0's): the release's own Gumbel sampler, in fp32
and fp64, and Philox's words drawn every way a kernel can ask for them
(scalar and block offsets, 32- and 64-bit offsets, seeds of either sign)
come out the same with them as without, in one interpreter; and they were
taken."""

from __future__ import annotations

import pytest

from tests.runtime import env as runtime_env

pytestmark = pytest.mark.runtime

CODE = """
import torch
import triton
import triton.language as tl
from triton.language import random
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction

import runtime_guest
from runtime_guest import emit

runtime_guest.use_triton_interpreter(shortcuts=False)
from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

language_patches = [0]
patch_lang = interpreter._patch_lang


def counted(fn):
    language_patches[0] += 1
    return patch_lang(fn)


interpreter._patch_lang = counted


@triton.jit
def philox_words(seed_ptr, words_ptr, uniforms_ptr, scalars_ptr, N: tl.constexpr,
                 WIDE: tl.constexpr):
    pid = tl.program_id(0)
    seed = tl.load(seed_ptr + pid)
    lanes = tl.arange(0, N)
    if WIDE:
        offsets = lanes.to(tl.int64) * 4294967311 + pid
    else:
        offsets = lanes + pid * 1000
    a, b, c, d = tl.randint4x(seed, offsets)
    tl.store(words_ptr + pid * 4 * N + lanes, a)
    tl.store(words_ptr + pid * 4 * N + N + lanes, b)
    tl.store(words_ptr + pid * 4 * N + 2 * N + lanes, c)
    tl.store(words_ptr + pid * 4 * N + 3 * N + lanes, d)
    tl.store(uniforms_ptr + pid * N + lanes, tl.rand(seed, offsets))
    tl.store(scalars_ptr + pid, tl.randint(seed, pid + 7))


def draw_everything():
    g = torch.Generator().manual_seed(11)
    rows, vocab = 48, 40
    seeds = torch.randint(-2**62, 2**62, (rows,), generator=g)
    out = []
    for wide in (False, True):
        words = torch.zeros(rows * 4 * 16, dtype=torch.int32)
        uniforms = torch.zeros(rows * 16)
        scalars = torch.zeros(rows, dtype=torch.int32)
        philox_words[(rows,)](seeds, words, uniforms, scalars, N=16, WIDE=wide)
        out += [words, uniforms, scalars]
    logits = torch.randn(rows, vocab, generator=g) * 3
    positions = torch.randint(0, 100_000, (rows,), generator=g)
    temperature = torch.rand(rows, generator=g) + 0.5
    temperature[::5] = 0.0
    mapping = torch.arange(rows, dtype=torch.int32)
    for fp64 in (False, True):
        extra = {"use_fp64": True} if fp64 else {}
        try:
            out.append(gumbel_sample(logits, mapping, temperature, seeds, positions,
                                     apply_temperature=True, **extra))
        except TypeError:
            pass  # a gumbel_sample without the fp64 option
    return out


before = draw_everything()
patches_before, language_patches[0] = language_patches[0], 0
runtime_guest._speed_up_interpreter()
after = draw_everything()
emit({
    "tensors": len(before),
    "same": [bool(torch.equal(x, y)) for x, y in zip(before, after)],
    "language_patches": [patches_before, language_patches[0]],
    "philox_in_numpy": "_philox_rounds_in_numpy" in
        InterpretedFunction.rewritten_fn[random.philox_impl.fn].__qualname__,
})
"""


@pytest.mark.parametrize("release", ["0.27.1", "0.26.0"], ids=["triton-3.8", "triton-3.6"])
def test_the_interpreter_shortcuts_change_no_draw(run_snippet, versioned_venvs, release):
    seen = run_snippet(runtime_env.venv_python(versioned_venvs(release)["pristine"]), CODE)
    assert seen["tensors"] >= 7
    assert seen["same"] == [True] * seen["tensors"]
    # Taken: triton.language is patched at most a few times per launch, not
    # at every helper call, and Philox's rounds run in numpy.
    before, after = seen["language_patches"]
    assert after < before / 10, seen
    assert seen["philox_in_numpy"]
