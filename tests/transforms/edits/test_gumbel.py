import pytest

from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.gumbel.judge import GUMBEL_NOISED_ARGMAX
from dflash2_backport.transforms.edits.gumbel.writer import GumbelNoisedArgmax
from dflash2_backport.transforms.edits.spec_step_seed.judge import STEP_SEED_HUNK

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    verdicts,
)


#: 0.27.1's module up to its random helpers; tl_rand32 from the hunk file of
#: the edit that seeds it per step.
HEADER = """
import torch

from vllm.triton_utils import HAS_TRITON, tl, tldevice, triton

_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10


@triton.jit
def tl_rand64(seed, offset, includes_zero: tl.constexpr):
    lo, hi, _, _ = tl.randint4x(seed, offset)
    r = (hi.to(tl.uint64) << 32) | lo.to(tl.uint64)
    return r.to(tl.float64) * 5.421010862427522170037e-20


""" + STEP_SEED_HUNK.before

#: The function as the edit inserts it, from its hunk file, after the two
#: blank lines that set it apart.
NEW_FUNCTION = "\n\n" + GUMBEL_NOISED_ARGMAX

BLOCK_ARGMAX = """

@triton.jit
def gumbel_block_argmax(
    logits,
    block,
    mask,
    token_idx,
    expanded_idx_mapping_ptr,
    temp_ptr,
    seeds_ptr,
    pos_ptr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    req_state_idx = tl.load(expanded_idx_mapping_ptr + token_idx).to(tl.int64)
    temp = tl.load(temp_ptr + req_state_idx).to(tl.float32)
    if temp != 0.0 and APPLY_TEMPERATURE:
        logits = logits / temp
    if temp != 0.0:
        seed = tl.load(seeds_ptr + req_state_idx)
        pos = tl.load(pos_ptr + token_idx)
        gumbel_seed = tl.randint(seed, pos)
        u = tl_rand32(gumbel_seed, block, includes_zero=False)
        logits = tl.where(mask, logits - tl.log(-tldevice.log1p(-u)), float("-inf"))
    value, idx = tl.max(logits, axis=0, return_indices=True)
    return value, idx


def gumbel_sample(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)
"""

PENDING = HEADER + BLOCK_ARGMAX
APPLIED = HEADER + NEW_FUNCTION + BLOCK_ARGMAX


def pending_and_applied(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


COSMETIC = {
    "comment above gumbel_block_argmax stays with it": pending_and_applied(
        "\n@triton.jit\ndef gumbel_block_argmax(",
        "\n# The per-block draw used by gumbel_sample.\n@triton.jit\n"
        "def gumbel_block_argmax(",
    ),
    "gumbel_block_argmax with another parameter list": pending_and_applied(
        "    USE_FP64: tl.constexpr,\n):\n    req_state_idx",
        "    USE_FP64: tl.constexpr,\n    PER_TOKEN_COL: tl.constexpr = False,\n"
        "):\n    req_state_idx",
    ),
    "random helpers imported rather than defined": (
        swap(
            PENDING,
            HEADER,
            "\nfrom vllm.triton_utils import tl, tldevice, triton\n"
            "from vllm.v1.worker.gpu.sample.rand import tl_rand32, tl_rand64\n",
        ),
        swap(
            APPLIED,
            HEADER,
            "\nfrom vllm.triton_utils import tl, tldevice, triton\n"
            "from vllm.v1.worker.gpu.sample.rand import tl_rand32, tl_rand64\n",
        ),
    ),
    "gumbel_block_argmax jitted with options": pending_and_applied(
        "\n@triton.jit\ndef gumbel_block_argmax(",
        "\n@triton.jit(do_not_specialize=['pos_ptr'])\ndef gumbel_block_argmax(",
    ),
    "gumbel_block_argmax also decorated otherwise": pending_and_applied(
        "\n@triton.jit\ndef gumbel_block_argmax(",
        "\n@some_registry.register\n@triton.jit\ndef gumbel_block_argmax(",
    ),
}

ALREADY_APPLIED = {
    "upstream 0.28.0's extra comment": swap(
        APPLIED,
        "    if USE_FP64:\n        logits = logits.to(tl.float64)\n",
        "    # fp32 is the default reduction dtype; fp64 is ~1/32-1/64x the throughput\n"
        "    # on H100/Ada/Blackwell and empirically indistinguishable for Gumbel-max.\n"
        "    if USE_FP64:\n        logits = logits.to(tl.float64)\n",
    ),
    "reworded docstring, single quotes, parameters on one line": swap(
        swap(
            swap(
                APPLIED,
                "    logits,\n    keys,\n    mask,\n    seed,\n    pos,\n    temp,\n",
                "    logits, keys, mask, seed, pos, temp,\n",
            ),
            '"""Argmax of logits under Gumbel-max sampling, or plain argmax at temp 0.',
            '"""Gumbel-max argmax over one block of logits.',
        ),
        'float("-inf"))\n\n    return tl.max',
        "float('-inf'))\n\n    return tl.max",
    ),
    "after gumbel_block_argmax, which calls it (upstream's layout)": (
        HEADER
        + swap(
            BLOCK_ARGMAX,
            "    value, idx = tl.max(logits, axis=0, return_indices=True)\n"
            "    return value, idx\n",
            "    return gumbel_noised_argmax(logits, block, mask, seed, pos, temp, "
            "USE_FP64=USE_FP64)\n",
        )
        + NEW_FUNCTION
    ),
}

DRIFT = {
    "fp32 branch without log1p": swap(
        APPLIED,
        "gumbel_noise = -tl.log(-tldevice.log1p(-u))\n        logits = tl.where",
        "gumbel_noise = -tl.log(-tl.log(u))\n        logits = tl.where",
    ),
    "APPLY_TEMPERATURE defaults to False": swap(
        APPLIED,
        "APPLY_TEMPERATURE: tl.constexpr = True,",
        "APPLY_TEMPERATURE: tl.constexpr = False,",
    ),
    "an extra IS_DRAFTING parameter (upstream 0.33.0)": swap(
        APPLIED,
        "    temp,\n    USE_FP64: tl.constexpr,",
        "    temp,\n    IS_DRAFTING: tl.constexpr,\n    USE_FP64: tl.constexpr,",
    ),
    "not a Triton function": swap(
        APPLIED, "@triton.jit\ndef gumbel_noised_argmax(", "def gumbel_noised_argmax("
    ),
    "returns only the index": swap(
        APPLIED,
        "    return tl.max(logits, axis=0, return_indices=True)\n",
        "    return tl.argmax(logits, axis=0)\n",
    ),
    "a pending file with its own gumbel_noised_argmax": swap(
        PENDING,
        "\n@triton.jit\ndef gumbel_block_argmax(",
        "\n@triton.jit\ndef gumbel_noised_argmax(logits, keys, mask, seed, pos, temp):\n"
        "    return tl.max(logits, axis=0, return_indices=True)\n\n\n"
        "@triton.jit\ndef gumbel_block_argmax(",
    ),
    "gumbel_block_argmax renamed": swap(
        PENDING, "def gumbel_block_argmax(", "def gumbel_argmax_block("
    ),
    "gumbel_block_argmax not a Triton function": swap(
        PENDING, "@triton.jit\ndef gumbel_block_argmax(", "def gumbel_block_argmax("
    ),
    "tldevice not imported": swap(
        PENDING,
        "from vllm.triton_utils import HAS_TRITON, tl, tldevice, triton",
        "from vllm.triton_utils import HAS_TRITON, tl, triton",
    ),
    "a number where the docstring was: code, not a docstring": swap(
        APPLIED,
        '    """Argmax of logits under Gumbel-max sampling, or plain argmax at temp 0.\n\n'
        "    `keys` indexes the noise, so the same token draws the same noise wherever it\n"
        "    appears; `pos` and `seed` place the draw in the request's stream, which is\n"
        '    what lets a draft and its verification agree.\n    """\n',
        "    0\n",
    ),
    "no 64-bit random helper": swap(
        PENDING,
        "@triton.jit\ndef tl_rand64(seed, offset, includes_zero: tl.constexpr):\n",
        "@triton.jit\ndef _rand64(seed, offset, includes_zero: tl.constexpr):\n",
    ),
}


PATCHED = {"inserted before gumbel_block_argmax": (PENDING, APPLIED), **COSMETIC}
HUNK = "gumbel_noised_argmax"


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_file_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(GumbelNoisedArgmax, before, after)
    assert verdicts(GumbelNoisedArgmax, before) == {HUNK: State.PENDING}
    assert verdicts(GumbelNoisedArgmax, after) == {HUNK: State.APPLIED}


@pytest.mark.parametrize(
    "source", [APPLIED, *ALREADY_APPLIED.values()], ids=["as written", *ALREADY_APPLIED]
)
def test_the_function_written_any_way_counts_as_applied(source: str) -> None:
    assert_left_alone(GumbelNoisedArgmax, source)
    assert verdicts(GumbelNoisedArgmax, source) == {HUNK: State.APPLIED}


def test_gumbel_block_argmax_is_not_rewritten() -> None:
    assert BLOCK_ARGMAX in output(GumbelNoisedArgmax, PENDING)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(GumbelNoisedArgmax, source).edit == "gumbel"


def test_a_missing_name_and_a_missing_anchor_are_both_named() -> None:
    source = swap(
        swap(PENDING, "def gumbel_block_argmax(", "def gumbel_argmax_block("),
        "from vllm.triton_utils import HAS_TRITON, tl, tldevice, triton",
        "from vllm.triton_utils import HAS_TRITON, tl, triton",
    )
    (drifted,) = refusal(GumbelNoisedArgmax, source).drifted
    assert "gumbel_block_argmax" in drifted.reason
    assert "`tldevice`" in drifted.reason


def test_a_crlf_file_stays_crlf_inside_the_inserted_docstring() -> None:
    assert output(GumbelNoisedArgmax, crlf(PENDING)) == crlf(APPLIED)


# -- revert ------------------------------------------------------------------


REVERTED_BY_MEANING = {
    **{
        name: (ALREADY_APPLIED[name], PENDING)
        for name in (
            "upstream 0.28.0's extra comment",
            "reworded docstring, single quotes, parameters on one line",
        )
    },
    "a comment right above the function goes with it": (
        swap(
            APPLIED,
            "\n@triton.jit\ndef gumbel_noised_argmax(",
            "\n# Shared with the draft walk.\n@triton.jit\ndef gumbel_noised_argmax(",
        ),
        PENDING,
    ),
    "moved to the end of the file": (
        HEADER + BLOCK_ARGMAX + NEW_FUNCTION,
        HEADER + BLOCK_ARGMAX,
    ),
}

REVERT_REFUSED = {
    "called by gumbel_block_argmax (upstream's layout)": (
        ALREADY_APPLIED[
            "after gumbel_block_argmax, which calls it (upstream's layout)"
        ],
        "`gumbel_block_argmax`",
    ),
    "bound to another module-level name": (
        APPLIED + "\n\nnoised_argmax = gumbel_noised_argmax\n",
        "'noised_argmax = gumbel_noised_argmax'",
    ),
}


@pytest.mark.parametrize(
    "source,expected", REVERTED_BY_MEANING.values(), ids=REVERTED_BY_MEANING.keys()
)
def test_an_applied_form_written_otherwise_is_reverted_by_meaning(
    source: str, expected: str
) -> None:
    assert verdicts(GumbelNoisedArgmax, source) == {HUNK: State.APPLIED}
    assert_reverted_exactly(GumbelNoisedArgmax, source, expected)


@pytest.mark.parametrize("source,caller", REVERT_REFUSED.values(), ids=REVERT_REFUSED)
def test_a_function_other_code_calls_is_not_removed(source: str, caller: str) -> None:
    assert_left_alone(GumbelNoisedArgmax, source)
    (drifted,) = revert_refusal(GumbelNoisedArgmax, source).drifted
    assert drifted.hunk == HUNK
    assert caller in drifted.reason


def test_a_crlf_file_is_reverted_byte_for_byte() -> None:
    assert output(GumbelNoisedArgmax, crlf(APPLIED), revert=True) == crlf(PENDING)


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_revert_gives_the_same_verdicts(before: str, after: str) -> None:
    for source, state in ((before, State.PENDING), (after, State.APPLIED)):
        assert verdicts(GumbelNoisedArgmax, source, revert=True) == {HUNK: state}
