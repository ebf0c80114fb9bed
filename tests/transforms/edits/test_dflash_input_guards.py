import pytest

from dflash2_backport.transforms.edits.dflash_input_guards.judge import DFLASH_INPUT_GUARDS
from dflash2_backport.transforms.framework.meaning import same_meaning
from dflash2_backport.transforms.framework.vocabulary import Direction, State
from dflash2_backport.transforms.edits.dflash_input_guards.writer import DFlashInputGuards

from .._cases import (
    assert_left_alone,
    assert_patched,
    case,
    crlf,
    output,
    refusal,
    revert_refusal,
    reverted,
    swap,
    swapped,
    verdicts,
)

(HUNK,) = DFLASH_INPUT_GUARDS.hunks
HEADER = """
import torch

from vllm.triton_utils import tl, triton
from vllm.v1.attention.backends.utils import PAD_SLOT_ID


def prepare_dflash_inputs(*args, **kwargs) -> None:
    pass


"""
# 0.27.1's kernel is a fact about the wheel (tests/integration checks the
# declaration holds it byte for byte); the hardening expected of it is
# written out here, as 0.28.0 has it in meaning.
PENDING = HEADER + HUNK.before
HARDENING = (
    (
        "    valid_ctx_end = ctx_end - num_rejected\n",
        "    valid_ctx_end = ctx_end - num_rejected\n"
        "    num_valid_ctx = valid_ctx_end - ctx_start\n",
    ),
    (
        "    is_query = (j >= num_ctx) & (j < num_ctx + num_query_per_req)\n"
        "    query_off = j - num_ctx\n",
        "    # The rejected rows at the end of the context are context no longer:\n"
        "    # they take no slot, and the query block follows the accepted rows.\n"
        "    is_valid_ctx = j < num_valid_ctx\n"
        "    is_query = (j >= num_valid_ctx) & (j < num_valid_ctx + num_query_per_req)\n"
        "    query_off = j - num_valid_ctx\n",
    ),
    (
        "ctx_pos_idx, mask=is_ctx, other=0)\n",
        "ctx_pos_idx, mask=is_valid_ctx, other=0)\n",
    ),
    (
        "ctx_block_num,\n        mask=is_ctx,\n",
        "ctx_block_num,\n        mask=is_valid_ctx,\n",
    ),
    (
        "    ctx_slot = ctx_block_id * block_size + (ctx_pos % block_size)\n",
        "    # Block 0 is the null block, which a sliding-window block table holds\n"
        "    # for every evicted block: a row there, like a rejected row, writes no\n"
        "    # draft KV. The stores below still cover every row, so that a replayed\n"
        "    # CUDA graph never reads a value left by an earlier batch.\n"
        "    ctx_resident = is_valid_ctx & (ctx_block_id != 0)\n"
        "    ctx_slot = tl.where(\n"
        "        ctx_resident,\n"
        "        ctx_block_id * block_size + (ctx_pos % block_size),\n"
        "        PAD_SLOT_ID,\n"
        "    )\n",
    ),
    (
        "    q_slot = q_block_id * block_size + (query_pos % block_size)\n",
        "    # Nor does a query row whose block is the null block.\n"
        "    q_resident = is_query & (q_block_id != 0)\n"
        "    q_slot = tl.where(\n"
        "        q_resident,\n"
        "        q_block_id * block_size + (query_pos % block_size),\n"
        "        PAD_SLOT_ID,\n"
        "    )\n",
    ),
    (
        "        tl.store(out_seq_lens_ptr + req_idx, last_valid_pos + 1 + num_query_per_req)\n",
        "        tl.store(\n"
        "            out_seq_lens_ptr + req_idx,\n"
        "            # Never past max_model_len, where the query positions stop.\n"
        "            tl.minimum(last_valid_pos + 1 + num_query_per_req, max_model_len),\n"
        "        )\n",
    ),
)
APPLIED = swapped(PENDING, *HARDENING)
# vLLM 0.26.0's kernel, read off its wheel: 0.27.1's without the request's
# temperature and seed copied in the kernel (0.26.0 copies them on the host).
COPY = (
    "        # Copy sampling state.\n"
    "        tl.store(\n"
    "            out_temperature_ptr + req_state_idx,\n"
    "            tl.load(temperature_ptr + req_state_idx),\n"
    "        )\n"
    "        tl.store(out_seeds_ptr + req_state_idx, tl.load(seeds_ptr + req_state_idx))\n"
)
WITHOUT_THE_COPY = (
    ("    out_temperature_ptr,\n    out_seeds_ptr,\n", ""),
    ("    # Sampling params\n    temperature_ptr,\n    seeds_ptr,\n", ""),
    (COPY, ""),
)
PENDING_0_26 = swapped(PENDING, *WITHOUT_THE_COPY)
APPLIED_0_26 = swapped(PENDING_0_26, *HARDENING)
NAME = HUNK.name
SLOT = "    ctx_slot = ctx_block_id * block_size + (ctx_pos % block_size)\n"
CTX_POS = "    ctx_pos = tl.load(target_positions_ptr + ctx_pos_idx, mask=is_ctx, other=0)\n"


def both(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


COSMETIC = {
    "a comment above the kernel stays with it": both(
        "@triton.jit\ndef _prepare_dflash_inputs_kernel(",
        "# One program per request and block of rows.\n@triton.jit\n"
        "def _prepare_dflash_inputs_kernel(",
    ),
    "comments on lines the hardening leaves": both(
        "    num_ctx = ctx_end - ctx_start\n",
        "    # rows of this request\n    num_ctx = ctx_end - ctx_start  # ctx rows\n",
    ),
    "a comment above a rewritten line stays above it": (
        swap(PENDING, SLOT, "    # flat slot of each row\n" + SLOT),
        swap(APPLIED, "    ctx_slot = tl.where(\n", "    # flat slot of each row\n"
             "    ctx_slot = tl.where(\n"),
    ),
    "a comment at the end of a rewritten line stays at its end": (
        swap(PENDING, SLOT, SLOT.replace("\n", "  # flat slot\n")),
        swap(APPLIED, "        PAD_SLOT_ID,\n    )\n    tl.store(out_context_positions",
             "        PAD_SLOT_ID,\n    )  # flat slot\n    tl.store(out_context_positions"),
    ),
    "the kernel last in the file, other code before it": (
        swap(PENDING, HEADER, HEADER.replace("    pass\n", "    pass\n\n\nX = 1\n")),
        swap(APPLIED, HEADER, HEADER.replace("    pass\n", "    pass\n\n\nX = 1\n")),
    ),
}
# A rewritten statement laid out unlike 0.27.1's comes back in 0.27.1's
# layout; every other line as it was. Each: before, after, reverted.
RELAID_OUT = {
    "a rewritten load wrapped over three lines": (
        swap(PENDING, CTX_POS,
             "    ctx_pos = tl.load(\n        target_positions_ptr + ctx_pos_idx, "
             "mask=is_ctx, other=0\n    )\n"),
        APPLIED,
        PENDING,
    ),
}
UPSTREAM_WORDED = swapped(
    APPLIED,
    ("    # Block 0 is the null block, which a sliding-window block table holds\n"
     "    # for every evicted block: a row there, like a rejected row, writes no\n"
     "    # draft KV. The stores below still cover every row, so that a replayed\n"
     "    # CUDA graph never reads a value left by an earlier batch.\n",
     "    # Block 0 is the null block. Neither kind of row may write draft KV\n"
     "    # into physical block 0.\n"),
    ("    # Nor does a query row whose block is the null block.\n", ""),
    ("        ctx_resident,\n        ctx_block_id * block_size + (ctx_pos % block_size),\n"
     "        PAD_SLOT_ID,\n    )\n",
     "        ctx_resident, ctx_block_id * block_size + (ctx_pos % block_size), PAD_SLOT_ID\n"
     "    )\n"),
)
ALREADY_APPLIED = {"upstream's comments, another layout": UPSTREAM_WORDED}

DRIFT = {
    "the null block checked, the rejected rows still context": swap(
        PENDING, SLOT,
        "    ctx_slot = tl.where(ctx_block_id != 0, ctx_block_id * block_size"
        " + (ctx_pos % block_size), PAD_SLOT_ID)\n",
    ),
    "seq_lens clamped one short": swap(
        APPLIED, "num_query_per_req, max_model_len),", "num_query_per_req, max_model_len - 1),"
    ),
    "a context-parallel argument (vLLM 0.29.0)": swap(
        PENDING, "    max_model_len,\n    SAMPLE_FROM_ANCHOR", "    max_model_len,\n"
        "    cp_rank,\n    SAMPLE_FROM_ANCHOR",
    ),
    "not a Triton kernel": swap(
        PENDING, "@triton.jit\ndef _prepare_dflash_inputs_kernel(", "def _prepare_dflash_inputs_kernel("
    ),
    "no kernel": swap(PENDING, "def _prepare_dflash_inputs_kernel(", "def _prepare_inputs_kernel("),
    "the kernel defined twice": PENDING + "\n\n" + HUNK.before,
    "0.26.0's kernel that still copies the temperature": swap(
        PENDING_0_26, "    max_model_len,\n", "    max_model_len,\n    temperature_ptr,\n"
    ),
    "0.27.1's parameters without the copy": swap(PENDING, COPY, ""),
    "two statements on one line": swap(
        PENDING,
        "    ctx_start = tl.load(target_query_start_loc_ptr + req_idx)\n"
        "    ctx_end = tl.load(target_query_start_loc_ptr + req_idx + 1)\n",
        "    ctx_start = tl.load(target_query_start_loc_ptr + req_idx); "
        "ctx_end = tl.load(target_query_start_loc_ptr + req_idx + 1)\n",
    ),
}


def test_the_expected_hardening_has_0_27_1s_meaning_until_applied() -> None:
    assert not same_meaning(PENDING, APPLIED)
    assert verdicts(DFlashInputGuards, PENDING) == {NAME: State.PENDING}
    assert verdicts(DFlashInputGuards, APPLIED) == {NAME: State.APPLIED}


PATCHED = {
    "the kernel is hardened": (PENDING, APPLIED),
    "0.26.0's kernel is hardened alike": (PENDING_0_26, APPLIED_0_26),
    **COSMETIC,
}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_kernel_is_hardened_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(DFlashInputGuards, before, after)


def test_a_crlf_file_stays_crlf_both_ways() -> None:
    assert output(DFlashInputGuards, crlf(PENDING)) == crlf(APPLIED)
    assert output(DFlashInputGuards, crlf(APPLIED), revert=True) == crlf(PENDING)


@pytest.mark.parametrize("before,after,back", RELAID_OUT.values(), ids=RELAID_OUT.keys())
def test_a_rewritten_statement_laid_out_otherwise_comes_back_in_0271s_layout(
    before: str, after: str, back: str
) -> None:
    checks = case(DFlashInputGuards)
    checks.assertCodemod(before, after)
    checks.assertCodemod(after, back, direction=Direction.REVERT)


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED.keys())
def test_a_hardened_kernel_written_otherwise_is_applied_and_reverts_by_meaning(
    source: str,
) -> None:
    assert_left_alone(DFlashInputGuards, source)
    assert verdicts(DFlashInputGuards, source) == {NAME: State.APPLIED}
    back = reverted(DFlashInputGuards, source)
    assert same_meaning(back, PENDING)
    assert verdicts(DFlashInputGuards, back) == {NAME: State.PENDING}


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_a_kernel_that_is_neither_is_refused_both_ways(source: str) -> None:
    assert refusal(DFlashInputGuards, source).edit == "dflash-input-guards"
    revert_refusal(DFlashInputGuards, source)


@pytest.mark.parametrize(
    "name,words",
    [
        ("seq_lens clamped one short", ["as vLLM 0.27.1 or vLLM 0.26.0 has it, or as the "
                                        "fix leaves it", "max_model_len - 1"]),
        ("a context-parallel argument (vLLM 0.29.0)", ["its signature adds `cp_rank`"]),
        ("two statements on one line", ["on a line of its own", "split it"]),
        ("no kernel", ["one module-level function _prepare_dflash_inputs_kernel", "none"]),
    ],
)
def test_the_refusal_says_where_the_kernel_departs(name: str, words: list[str]) -> None:
    (drifted,) = refusal(DFlashInputGuards, DRIFT[name]).drifted
    assert drifted.hunk == NAME
    for word in words:
        assert word in drifted.reason, drifted.reason


def test_the_declaration_names_the_release_that_carries_the_fix() -> None:
    assert DFLASH_INPUT_GUARDS.fix is not None
    assert DFLASH_INPUT_GUARDS.fix.release == "0.28.0"
