"""The per-step seed (vLLM 0.33.0's `spec_step_seed`), as tables: 0.27.1's
code (pending) and the fix's (applied) written by hand, in its two files."""

import pytest

from dflash2_backport.transforms.edits.spec_step_seed.judge import (
    IMPORT_HUNK,
    STEP_SEED_HUNK,
    UNIFORM_HUNK,
)
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.spec_step_seed.writer import BlockUniform, StepSeed

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)

NAME = "spec-step-seed"

# -- sample/gumbel.py ---------------------------------------------------------------

#: 0.27.1's module up to tl_rand32, the function the fix's own lines follow
#: (from the hunk's file).
TL_RAND32 = '''
import torch

from vllm.triton_utils import HAS_TRITON, tl, tldevice, triton

_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10


''' + STEP_SEED_HUNK.before
STEP_SEED = STEP_SEED_HUNK.after.removeprefix(STEP_SEED_HUNK.before)
BLOCK_ARGMAX = '''

@triton.jit
def gumbel_block_argmax(logits, block, mask, seed, pos):
    u = tl_rand32(tl.randint(seed, pos), block, includes_zero=False)
    return tl.max(tl.where(mask, logits - tl.log(-tldevice.log1p(-u)), -1.0), axis=0)
'''
GUMBEL_PENDING = TL_RAND32 + BLOCK_ARGMAX
GUMBEL_APPLIED = TL_RAND32 + STEP_SEED + BLOCK_ARGMAX

GUMBEL_ALREADY_APPLIED = {
    "without its docstring": swapped(
        GUMBEL_APPLIED,
        ('    """The seed of a request\'s draws at one draft step: the step goes into the\n'
         "    seed's high 32 bits, so that each step of a block draws on a stream of its\n"
         '    own and a position drafted again at another step draws afresh."""\n', ""),
    ),
}

GUMBEL_DRIFT = {
    "the step mixed into the low bits": swap(
        GUMBEL_APPLIED, "(tl.cast(step, tl.int64) << 32)", "tl.cast(step, tl.int64)"
    ),
    "another spec_step_seed elsewhere in the module": GUMBEL_PENDING
    + "\n\ndef spec_step_seed(seed, step):\n    return seed + step\n",
    "a second one beside the fix's": GUMBEL_APPLIED
    + "\n\nif HAS_TRITON:\n    spec_step_seed = None\n",
    "tl_rand32 changed": swap(
        GUMBEL_PENDING, "        u = tl.maximum(u, _TL_RAND_MIN)\n", "        u = u + _TL_RAND_MIN\n"
    ),
    "no tl_rand32": swap(GUMBEL_PENDING, "def tl_rand32(", "def rand32("),
}


def test_gumbel_py_is_patched_then_left_alone_each_way() -> None:
    assert_patched(StepSeed, GUMBEL_PENDING, GUMBEL_APPLIED)
    assert verdicts(StepSeed, GUMBEL_PENDING) == {STEP_SEED_HUNK.name: State.PENDING}
    assert verdicts(StepSeed, GUMBEL_APPLIED) == {STEP_SEED_HUNK.name: State.APPLIED}


@pytest.mark.parametrize("source", GUMBEL_ALREADY_APPLIED.values(), ids=GUMBEL_ALREADY_APPLIED)
def test_spec_step_seed_written_otherwise_is_applied_and_reverted_by_meaning(source) -> None:
    assert_left_alone(StepSeed, source)
    assert_reverted_exactly(StepSeed, source, GUMBEL_PENDING)


@pytest.mark.parametrize("source", GUMBEL_DRIFT.values(), ids=GUMBEL_DRIFT)
def test_gumbel_py_variants_are_refused(source: str) -> None:
    assert refusal(StepSeed, source).edit == NAME


def test_spec_step_seed_stays_while_gumbel_py_calls_it() -> None:
    source = swap(
        GUMBEL_APPLIED,
        "    u = tl_rand32(tl.randint(seed, pos), block, includes_zero=False)\n",
        "    u = tl_rand32(tl.randint(spec_step_seed(seed, 0), pos), block, "
        "includes_zero=False)\n",
    )
    (drifted,) = revert_refusal(StepSeed, source).drifted
    assert "`gumbel_block_argmax`" in drifted.reason


# -- spec_decode/rejection_sampler_utils.py -----------------------------------------

REJECTION_PENDING = '''
import torch

from vllm.triton_utils import tl, tldevice, triton
from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32


@triton.jit
def _rejection_kernel(
    sampled_ptr,
    seed_ptr,
    pos_ptr,
    num_draft_tokens,
    USE_BLOCK_VERIFICATION: tl.constexpr,
):
    seed = tl.load(seed_ptr)
    accepted_length = tl.zeros((), tl.int64)
    for i in range(num_draft_tokens):
        pos = tl.load(pos_ptr + i)
        u = tl_rand32(seed, pos, includes_zero=False)
        if USE_BLOCK_VERIFICATION:
            accepted_length = tl.where(u <= 0.5, i + 1, accepted_length)
    tl.store(sampled_ptr, accepted_length)


@triton.jit
def _resample_kernel(seed_ptr, pos_ptr):
    u = tl_rand32(tl.load(seed_ptr), tl.load(pos_ptr), includes_zero=False)
    return u
'''
REJECTION_APPLIED = swapped(
    REJECTION_PENDING,
    (
        "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32\n",
        "from vllm.v1.worker.gpu.sample.gumbel import (\n"
        "    gumbel_block_argmax,\n    spec_step_seed,\n    tl_rand32,\n)\n",
    ),
    (
        "        u = tl_rand32(seed, pos, includes_zero=False)\n",
        "        step_seed = spec_step_seed(seed, i) if USE_BLOCK_VERIFICATION else seed\n"
        "        u = tl_rand32(step_seed, pos, includes_zero=False)\n",
    ),
)
REJECTION_HUNKS = (IMPORT_HUNK.name, UNIFORM_HUNK.name)

# The gumbel helpers imported in another order: the same names, patched as
# 0.27.1's line is (reverted, the line comes back in 0.27.1's order).
REORDERED_IMPORT = swap(
    REJECTION_PENDING,
    "import gumbel_block_argmax, tl_rand32\n",
    "import tl_rand32, gumbel_block_argmax\n",
)


def test_the_gumbel_helpers_imported_in_another_order_are_patched() -> None:
    assert verdicts(BlockUniform, REORDERED_IMPORT) == dict.fromkeys(
        REJECTION_HUNKS, State.PENDING
    )
    assert output(BlockUniform, REORDERED_IMPORT) == REJECTION_APPLIED


# isort's force-single-line: the helpers one name a line, and the fix's name
# on a line of its own between them, where isort puts it.
ONE_A_LINE = (
    "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax\n"
    "from vllm.v1.worker.gpu.sample.gumbel import tl_rand32\n"
)
ONE_A_LINE_PENDING = swap(
    REJECTION_PENDING,
    "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32\n",
    ONE_A_LINE,
)
ONE_A_LINE_APPLIED = swapped(
    ONE_A_LINE_PENDING,
    (
        ONE_A_LINE,
        "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax\n"
        "from vllm.v1.worker.gpu.sample.gumbel import spec_step_seed\n"
        "from vllm.v1.worker.gpu.sample.gumbel import tl_rand32\n",
    ),
    (
        "        u = tl_rand32(seed, pos, includes_zero=False)\n",
        "        step_seed = spec_step_seed(seed, i) if USE_BLOCK_VERIFICATION else seed\n"
        "        u = tl_rand32(step_seed, pos, includes_zero=False)\n",
    ),
)


def test_the_helpers_imported_one_name_a_line_get_the_fix_s_name_alike() -> None:
    assert_patched(BlockUniform, ONE_A_LINE_PENDING, ONE_A_LINE_APPLIED)
    assert verdicts(BlockUniform, ONE_A_LINE_APPLIED) == dict.fromkeys(
        REJECTION_HUNKS, State.APPLIED
    )


REJECTION_ALREADY_APPLIED = {
    "the import on one line": swapped(
        REJECTION_APPLIED,
        (
            "from vllm.v1.worker.gpu.sample.gumbel import (\n"
            "    gumbel_block_argmax,\n    spec_step_seed,\n    tl_rand32,\n)\n",
            "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, "
            "spec_step_seed, tl_rand32\n",
        ),
    ),
}

REJECTION_DRIFT = {
    "standard verification's uniform mixed too": swap(
        REJECTION_APPLIED,
        "        step_seed = spec_step_seed(seed, i) if USE_BLOCK_VERIFICATION else seed\n",
        "        step_seed = spec_step_seed(seed, i)\n",
    ),
    "the uniform drawn twice": swap(
        REJECTION_PENDING,
        "        if USE_BLOCK_VERIFICATION:\n",
        "        u = tl_rand32(seed, pos, includes_zero=False)\n"
        "        if USE_BLOCK_VERIFICATION:\n",
    ),
    "the uniform keyed otherwise": swap(
        REJECTION_PENDING,
        "        u = tl_rand32(seed, pos, includes_zero=False)\n",
        "        u = tl_rand32(seed, pos + 1, includes_zero=False)\n",
    ),
    "the gumbel helpers imported from elsewhere": swap(
        REJECTION_PENDING,
        "from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32\n",
        "from vllm.v1.worker.gpu.sample.rand import gumbel_block_argmax, tl_rand32\n",
    ),
    "no _rejection_kernel": swap(REJECTION_PENDING, "def _rejection_kernel(", "def _reject("),
    # The fixed draw reads `i` and USE_BLOCK_VERIFICATION: named otherwise,
    # it would read an unbound name.
    "the draft step named otherwise": swapped(
        REJECTION_PENDING,
        ("    for i in range(num_draft_tokens):\n", "    for step in range(num_draft_tokens):\n"),
        ("        pos = tl.load(pos_ptr + i)\n", "        pos = tl.load(pos_ptr + step)\n"),
        ("u <= 0.5, i + 1,", "u <= 0.5, step + 1,"),
    ),
    "the switch named otherwise": REJECTION_PENDING.replace(
        "USE_BLOCK_VERIFICATION", "BLOCK_VERIFY"
    ),
}


def test_the_rejection_sampler_is_patched_then_left_alone_each_way() -> None:
    assert_patched(BlockUniform, REJECTION_PENDING, REJECTION_APPLIED)
    assert verdicts(BlockUniform, REJECTION_PENDING) == dict.fromkeys(
        REJECTION_HUNKS, State.PENDING
    )
    assert verdicts(BlockUniform, REJECTION_APPLIED) == dict.fromkeys(
        REJECTION_HUNKS, State.APPLIED
    )


def test_only_block_verification_s_uniform_changes() -> None:
    patched = output(BlockUniform, REJECTION_PENDING)
    # The resample kernel's draw and standard verification's seed stay.
    assert "    u = tl_rand32(tl.load(seed_ptr), tl.load(pos_ptr), includes_zero=False)\n" in patched
    assert "if USE_BLOCK_VERIFICATION else seed\n" in patched


@pytest.mark.parametrize(
    "source", REJECTION_ALREADY_APPLIED.values(), ids=REJECTION_ALREADY_APPLIED
)
def test_the_fix_written_otherwise_is_applied_and_reverted_by_meaning(source: str) -> None:
    assert_left_alone(BlockUniform, source)
    assert verdicts(BlockUniform, source) == dict.fromkeys(REJECTION_HUNKS, State.APPLIED)
    assert_reverted_exactly(BlockUniform, source, REJECTION_PENDING)


@pytest.mark.parametrize("source", REJECTION_DRIFT.values(), ids=REJECTION_DRIFT)
def test_rejection_sampler_variants_are_refused(source: str) -> None:
    assert refusal(BlockUniform, source).edit == NAME


@pytest.mark.parametrize(
    "transform,pending,applied",
    [(StepSeed, GUMBEL_PENDING, GUMBEL_APPLIED),
     (BlockUniform, REJECTION_PENDING, REJECTION_APPLIED)],
    ids=["gumbel", "rejection sampler"],
)
def test_a_crlf_file_is_patched_and_reverted_byte_for_byte(transform, pending, applied) -> None:
    assert output(transform, crlf(pending)) == crlf(applied)
    assert output(transform, crlf(applied), revert=True) == crlf(pending)
