"""The draft noise stream (vLLM 0.29.0's `_DRAFT_NOISE_SALT`, passed on
through `IS_DRAFTING`), as tables: 0.27.1's code (pending) and the fix's
(applied) written by hand, in each of its three files."""

import ast
import textwrap

import pytest

from dflash2_backport.transforms.edits.draft_noise_salt.judge import (
    BLOCK_ARGMAX,
    DSPARK_DRAW,
    SALT_HUNK,
    SAMPLE,
    SAMPLE_DRAFT,
    SAMPLE_KERNEL,
)
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_noise_salt.writer import (
    DraftSampling,
    DSparkSampling,
    GumbelStreams,
)
from tests.wheels import vllm_source

from .._cases import (
    assert_applied_and_reverted_exactly,
    Transform,
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

NAME = "draft-noise-salt"

# -- sample/gumbel.py ---------------------------------------------------------------

HEADER = """
import torch

from vllm.triton_utils import HAS_TRITON, tl, tldevice, triton

# Smallest positive value produced by Triton's fp32 `tl.rand`.
_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10


"""
# 0.27.1's three functions are facts about the wheel, which the real-wheel
# tests apply the edit to; what the fix makes of them is written out here.
PENDING = HEADER + "\n\n".join((BLOCK_ARGMAX.before, SAMPLE_KERNEL.before, SAMPLE.before))
RAND_MIN = "_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10\n"
SALT = """
# Added to a draft's sampling positions, so that its Gumbel noise is never
# the noise verification resamples with after rejecting it: verification is
# a probability-ratio test, and a proposal correlated with the residual draw
# biases the output. Positions never come near 2**30.
_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)
"""
STREAMS = (
    (RAND_MIN, RAND_MIN + SALT),
    (
        "    PER_TOKEN_COL: tl.constexpr = False,\n):\n",
        "    PER_TOKEN_COL: tl.constexpr = False,\n    IS_DRAFTING: tl.constexpr = False,\n):\n",
    ),
    (
        "        pos = tl.load(pos_ptr + token_idx)\n",
        "        pos = tl.load(pos_ptr + token_idx)\n"
        "        if IS_DRAFTING:\n"
        "            # A draft draws on a stream of its own (see _DRAFT_NOISE_SALT).\n"
        "            pos = pos + _DRAFT_NOISE_SALT\n",
    ),
    (
        "    PER_TOKEN_COL: tl.constexpr,\n):\n",
        "    PER_TOKEN_COL: tl.constexpr,\n    IS_DRAFTING: tl.constexpr = False,\n):\n",
    ),
    (
        "        PER_TOKEN_COL=PER_TOKEN_COL,\n    )\n",
        "        PER_TOKEN_COL=PER_TOKEN_COL,\n        IS_DRAFTING=IS_DRAFTING,\n    )\n",
    ),
    (
        "    use_fp64: bool = False,\n) -> torch.Tensor:\n",
        "    use_fp64: bool = False,\n    is_drafting: bool = False,\n) -> torch.Tensor:\n",
    ),
    (
        "        PER_TOKEN_COL=per_token_col,\n    )\n",
        "        PER_TOKEN_COL=per_token_col,\n        IS_DRAFTING=is_drafting,\n    )\n",
    ),
)
APPLIED = swapped(PENDING, *STREAMS)
GUMBEL_HUNKS = [h.name for h in (SALT_HUNK, BLOCK_ARGMAX, SAMPLE_KERNEL, SAMPLE)]
SALTED = "        if IS_DRAFTING:\n"
UPSTREAM_SALT = """
# Offset salt keeping the draft's Gumbel noise disjoint from the target's.
# Verification is a probability-ratio test, not a Gumbel coupling, so a proposal
# and the residual it is resampled from must not share a noise vector.
# Positions are int64 and never approach 2**30, so the streams cannot collide.
_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)
"""


def both(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


GUMBEL_COSMETIC = {
    "a comment above _TL_RAND_MIN stays with it": both(
        "# Smallest positive value", "# (clamps zero draws)\n# Smallest positive value"
    ),
    "the kernel launch's comment stays": both(
        "    # NOTE(woosuk): Use int64 for later indexing.\n",
        "    # NOTE(woosuk): Use int64 for later indexing (the kernel wrote int64).\n",
    ),
    "code after the functions": both(
        "    return sampled\n", "    return sampled\n\n\nGUMBEL_BLOCK = 1024\n"
    ),
}
# Each row: the file, and what the refusal says it found.
GUMBEL_DRIFT = {
    # A salt already in the fix's place counts as the fix's only when it is
    # 0.29.0's statement (test_0_29_0s_salt_in_the_fixs_place_counts_as_the_fixs);
    # any other definition would decide the draft's stream in the fix's stead.
    "a salt of another value where the fix puts it": (
        swap(PENDING, RAND_MIN, RAND_MIN + "_DRAFT_NOISE_SALT = 1 << 16\n"),
        "'_DRAFT_NOISE_SALT = 1 << 16' on line 7",
    ),
    "0.29.0's salt, elsewhere in the module": (
        PENDING + "\n\n_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)\n",
        "'_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON e...' on line 192",
    ),
    "a salt defined under `if HAS_TRITON:`": (
        PENDING + "\n\nif HAS_TRITON:\n    _DRAFT_NOISE_SALT = tl.constexpr(7)\n",
        "'_DRAFT_NOISE_SALT = tl.constexpr(7)'",
    ),
    "a salt imported": (
        swap(PENDING, "import torch\n", "import torch\nfrom noise import _DRAFT_NOISE_SALT\n"),
        "'from noise import _DRAFT_NOISE_SALT'",
    ),
    "the fix's salt, and another value after it": (
        APPLIED + "\n\n_DRAFT_NOISE_SALT = 1 << 16\n",
        "'_DRAFT_NOISE_SALT = 1 << 16'",
    ),
    "the fix's salt, and a function that sets it": (
        APPLIED
        + "\n\ndef reseed(salt):\n    global _DRAFT_NOISE_SALT\n    _DRAFT_NOISE_SALT = salt\n",
        "'def reseed(salt): global _DRAFT_NOISE_SALT",
    ),
    "the salt of 2**16": (
        swap(
            APPLIED,
            "(1 << 30) if HAS_TRITON else (1 << 30)",
            "(1 << 16) if HAS_TRITON else (1 << 16)",
        ),
        "'_DRAFT_NOISE_SALT = tl.constexpr(1 << 16)",
    ),
    "a draft's position salted whether drafting or not": (
        swapped(
            APPLIED,
            (SALTED, ""),
            (
                "            # A draft draws on a stream of its own (see _DRAFT_NOISE_SALT).\n"
                "            pos = pos + _DRAFT_NOISE_SALT\n",
                "        pos = pos + _DRAFT_NOISE_SALT\n",
            ),
        ),
        "`gumbel_block_argmax` as vLLM 0.27.1 has it, or as the fix leaves it",
    ),
    "the kernel takes the flag and does not pass it on": (
        swap(APPLIED, "        IS_DRAFTING=IS_DRAFTING,\n", ""),
        "`_gumbel_sample_kernel` as vLLM 0.27.1 has it, or as the fix leaves it",
    ),
    "gumbel_sample takes is_drafting and never drafts": (
        swap(APPLIED, "        IS_DRAFTING=is_drafting,\n", "        IS_DRAFTING=False,\n"),
        "`gumbel_sample` as vLLM 0.27.1 has it, or as the fix leaves it",
    ),
    "every draw salted by default": (
        swap(APPLIED, "    is_drafting: bool = False,\n", "    is_drafting: bool = True,\n"),
        "`gumbel_sample` as vLLM 0.27.1 has it, or as the fix leaves it",
    ),
    "no _TL_RAND_MIN to put the salt after": (
        swap(PENDING, RAND_MIN, "_TL_RAND_MIN = 4.6566127342e-10\n"),
        "`_TL_RAND_MIN = ...` at module level as vLLM 0.27.1 has it",
    ),
}


def test_the_gumbel_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(GumbelStreams, PENDING)) == GUMBEL_HUNKS


@pytest.mark.parametrize(
    "before,after",
    [(PENDING, APPLIED), *GUMBEL_COSMETIC.values()],
    ids=["0.27.1", *GUMBEL_COSMETIC],
)
def test_pending_gumbel_is_salted_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(GumbelStreams, before, after)
    assert set(verdicts(GumbelStreams, before).values()) == {State.PENDING}
    assert set(verdicts(GumbelStreams, after).values()) == {State.APPLIED}


def test_0_29_0s_salt_written_in_its_own_words_counts_as_applied_and_reverts_exactly() -> None:
    upstream = swap(APPLIED, SALT, UPSTREAM_SALT)
    assert_left_alone(GumbelStreams, upstream)
    assert set(verdicts(GumbelStreams, upstream).values()) == {State.APPLIED}
    assert_reverted_exactly(GumbelStreams, upstream, PENDING)


def test_0_29_0s_salt_in_the_fixs_place_counts_as_the_fixs() -> None:
    # A gumbel.py that holds 0.29.0's salt, as 0.29.0 writes it and where it
    # puts it, beside 0.27.1's functions: the same statement as the fix's,
    # which the fix cannot tell from its own. Apply adds the flag and leaves
    # the salt as it is; revert takes the whole fix out, the salt included,
    # and gives back 0.27.1.
    salted = swap(PENDING, RAND_MIN, RAND_MIN + UPSTREAM_SALT)
    assert verdicts(GumbelStreams, salted) == {
        SALT_HUNK.name: State.APPLIED,
        BLOCK_ARGMAX.name: State.PENDING,
        SAMPLE_KERNEL.name: State.PENDING,
        SAMPLE.name: State.PENDING,
    }
    upstream = swap(APPLIED, SALT, UPSTREAM_SALT)
    assert output(GumbelStreams, salted) == upstream
    assert_reverted_exactly(GumbelStreams, upstream, PENDING)


@pytest.mark.parametrize("source,found", GUMBEL_DRIFT.values(), ids=GUMBEL_DRIFT)
def test_a_gumbel_that_is_neither_is_refused_naming_what_it_found(source: str, found: str) -> None:
    refused = refusal(GumbelStreams, source)
    assert refused.edit == NAME
    assert any(found in h.reason for h in refused.drifted), [h.reason for h in refused.drifted]


@pytest.mark.parametrize(
    "name",
    ["the fix's salt, and another value after it", "the fix's salt, and a function that sets it"],
)
def test_a_second_salt_after_the_fixs_is_refused_by_revert_too(name: str) -> None:
    (drifted,) = revert_refusal(GumbelStreams, GUMBEL_DRIFT[name][0]).drifted
    assert drifted.hunk == SALT_HUNK.name
    assert "a definition the fix did not write" in drifted.reason


def test_a_salt_defined_before_the_fix_says_to_take_it_out() -> None:
    (drifted,) = refusal(
        GumbelStreams, GUMBEL_DRIFT["a salt of another value where the fix puts it"][0]
    ).drifted
    assert drifted.hunk == SALT_HUNK.name
    assert drifted.reason == (
        "expected no `_DRAFT_NOISE_SALT` in the module but the one the fix defines "
        "after `_TL_RAND_MIN = ...`, found '_DRAFT_NOISE_SALT = 1 << 16' on line 7, "
        "a definition the fix did not write; take it out, and the fix defines the salt"
    )


def test_the_salt_other_code_reads_is_not_removed() -> None:
    source = APPLIED + "\n\ndef draft_position(pos):\n    return pos + _DRAFT_NOISE_SALT\n"
    assert_left_alone(GumbelStreams, source)
    (drifted,) = revert_refusal(GumbelStreams, source).drifted
    assert drifted.hunk == SALT_HUNK.name
    assert "`draft_position`" in drifted.reason


def test_a_crlf_gumbel_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(GumbelStreams, crlf(PENDING)) == crlf(APPLIED)
    assert output(GumbelStreams, crlf(APPLIED), revert=True) == crlf(PENDING)


# -- the draws: spec_decode/speculator.py and dspark/speculator.py -----------------

DRAFT_MODEL_HEAD = """
import torch

from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample


class DraftModelSpeculator(BaseSpeculator):
    def _greedy_sample_draft(self, hidden_states: torch.Tensor) -> torch.Tensor:
        logits = self.model.compute_logits(hidden_states)
        return logits.argmax(dim=-1)

"""
#: `sample_draft` as 0.27.1 has it and as the fix leaves it, from the hunk's files.
DRAFT_MODEL_PENDING = DRAFT_MODEL_HEAD + textwrap.indent(SAMPLE_DRAFT.before, "    ")
DRAFT_MODEL_APPLIED = DRAFT_MODEL_HEAD + textwrap.indent(SAMPLE_DRAFT.after, "    ")
#: DSpark's draw as 0.27.1 has it, from the hunk's file.
DSPARK_CALL = textwrap.indent(DSPARK_DRAW.before, " " * 16)
DSPARK_GREEDY = """\
                draft_sampled_i = self.model.map_draft_to_target(
                    logits_i.argmax(dim=-1)
                )
"""
DSPARK_PENDING = f'''
import torch

from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator


class DSparkSpeculator(DFlashSpeculator):
    def _sample_sequential(self, num_reqs: int, head_hidden: torch.Tensor) -> None:
        n_spec = self.num_speculative_steps
        prev = self.input_buffers.input_ids[self._anchor_idx[:num_reqs]]
        for i in range(n_spec):
            logits_i = base_logits[:, i] + bias
            if self.draft_logits is not None:
                # sample_pos is the predicted token's position Q; the target
                # verifies it with the predecessor's Gumbel key (Q-1). Pass Q-1.
{DSPARK_CALL}            else:
{DSPARK_GREEDY}            self.draft_tokens[:num_reqs, i] = draft_sampled_i
            prev = draft_sampled_i
'''
DSPARK_APPLIED = swap(
    DSPARK_PENDING,
    "                    use_fp64=self.use_fp64_gumbel,\n",
    "                    use_fp64=self.use_fp64_gumbel,\n"
    "                    # Noise of its own, not the stream verification resamples with.\n"
    "                    is_drafting=True,\n",
)
DRAWS: dict[str, tuple[Transform, str, str, str]] = {
    "DraftModelSpeculator.sample_draft": (
        DraftSampling, DRAFT_MODEL_PENDING, DRAFT_MODEL_APPLIED, SAMPLE_DRAFT.name
    ),
    "DSparkSpeculator._sample_sequential": (
        DSparkSampling, DSPARK_PENDING, DSPARK_APPLIED, DSPARK_DRAW.name
    ),
}
# The flag written without the comment, on the line before it (each: the
# writer, the file, what reverting it writes).
DRAW_ALREADY_APPLIED = {
    "sample_draft, the flag beside use_fp64": (
        DraftSampling,
        swap(
            DRAFT_MODEL_APPLIED,
            "                use_fp64=self.use_fp64_gumbel,\n"
            "                # Noise of its own, not the stream verification resamples with.\n"
            "                is_drafting=True,\n",
            "                use_fp64=self.use_fp64_gumbel, is_drafting=True\n",
        ),
        DRAFT_MODEL_PENDING,
    ),
    "DSpark, the flag beside use_fp64": (
        DSparkSampling,
        swap(
            DSPARK_APPLIED,
            "                    use_fp64=self.use_fp64_gumbel,\n"
            "                    # Noise of its own, not the stream verification resamples with.\n"
            "                    is_drafting=True,\n",
            "                    use_fp64=self.use_fp64_gumbel, is_drafting=True\n",
        ),
        DSPARK_PENDING,
    ),
}
# Each row: the writer, the file, and what the refusal says it found.
DRAW_DRIFT = {
    "the draft model draws as verification does": (
        DraftSampling,
        swap(DRAFT_MODEL_APPLIED, "is_drafting=True,", "is_drafting=False,"),
        "`DraftModelSpeculator.sample_draft` as vLLM 0.27.1 has it, or as the fix leaves it",
    ),
    "the draft model draws at other positions": (
        DraftSampling,
        swap(DRAFT_MODEL_PENDING, "positions + 1,", "positions,"),
        "against 0.27.1's",
    ),
    "no sample_draft": (
        DraftSampling,
        swap(DRAFT_MODEL_PENDING, "def sample_draft(", "def draw_draft("),
        "expected one method DraftModelSpeculator.sample_draft, found none",
    ),
    "DSpark draws as verification does": (
        DSparkSampling,
        swap(DSPARK_APPLIED, "is_drafting=True,", "is_drafting=False,"),
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "DSpark draws greedy rows with the noise too": (
        DSparkSampling,
        swap(DSPARK_PENDING, DSPARK_GREEDY, DSPARK_CALL),
        "as vLLM 0.27.1 has it, or as the fix leaves it, found 2 of them",
    ),
}


@pytest.mark.parametrize("writer,before,after,hunk", DRAWS.values(), ids=DRAWS)
def test_a_pending_draw_passes_is_drafting_true_then_is_left_alone_and_reverted_exactly(
    writer: Transform, before: str, after: str, hunk: str
) -> None:
    assert_patched(writer, before, after)
    assert verdicts(writer, before) == {hunk: State.PENDING}
    assert verdicts(writer, after) == {hunk: State.APPLIED}


@pytest.mark.parametrize(
    "writer,source,back", DRAW_ALREADY_APPLIED.values(), ids=DRAW_ALREADY_APPLIED
)
def test_a_draw_with_the_flag_written_otherwise_is_applied_and_reverts_exactly(
    writer: Transform, source: str, back: str
) -> None:
    assert_applied_and_reverted_exactly(writer, source, back)


@pytest.mark.parametrize("writer,source,found", DRAW_DRIFT.values(), ids=DRAW_DRIFT)
def test_a_draw_that_is_neither_is_refused_naming_what_it_found(
    writer: Transform, source: str, found: str
) -> None:
    refused = refusal(writer, source)
    assert refused.edit == NAME
    (drifted,) = refused.drifted
    assert found in drifted.reason, drifted.reason


@pytest.mark.parametrize("writer,before,after,hunk", DRAWS.values(), ids=DRAWS)
def test_a_crlf_draw_is_patched_and_reverted_byte_for_byte(
    writer: Transform, before: str, after: str, hunk: str
) -> None:
    assert output(writer, crlf(before)) == crlf(after)
    assert output(writer, crlf(after), revert=True) == crlf(before)


# -- against vLLM 0.29.0, where the fix comes from ------------------------------------

UPSTREAM = "0.29.0"
GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"
DRAFT_MODEL = "vllm/v1/worker/gpu/spec_decode/speculator.py"
DSPARK = "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"
# Where the flag is passed on, in the table's files and in 0.29.0's: (file
# in the table, 0.29.0's file, the definition, the callee, the keyword). 0.29.0
# moved the noise into `gumbel_noised_argmax` and renamed the logits cache;
# the flag's way through is the same.
FLAG_PASSED = {
    "the kernel passes IS_DRAFTING to the block argmax": (
        APPLIED, GUMBEL, "_gumbel_sample_kernel", "gumbel_block_argmax", "IS_DRAFTING"
    ),
    "gumbel_sample passes is_drafting to the kernel": (
        APPLIED, GUMBEL, "gumbel_sample", "_gumbel_sample_kernel", "IS_DRAFTING"
    ),
    "the draft model draws as a draft": (
        DRAFT_MODEL_APPLIED, DRAFT_MODEL, "DraftModelSpeculator", "gumbel_sample", "is_drafting"
    ),
    "DSpark draws as a draft": (
        DSPARK_APPLIED, DSPARK, "DSparkSpeculator", "gumbel_sample", "is_drafting"
    ),
}


def _definition(module: ast.Module, name: str) -> ast.AST:
    (found,) = [
        n for n in module.body
        if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name
    ]
    return found


def _callee(call: ast.Call) -> str:
    func = call.func.value if isinstance(call.func, ast.Subscript) else call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _passed(code: str, definition: str, callee: str, keyword: str) -> list[str]:
    """What each call of `callee` in `definition` passes as `keyword`."""
    return [
        ast.dump(k.value)
        for call in ast.walk(_definition(ast.parse(code), definition))
        if isinstance(call, ast.Call) and _callee(call) == callee
        for k in call.keywords
        if k.arg == keyword
    ]


def _upstream(relative: str) -> str:
    return (vllm_source(UPSTREAM) / relative).read_text()


@pytest.mark.wheels
def test_the_salt_is_0_29_0s_by_meaning() -> None:
    def salt(code: str) -> list[str]:
        return [
            ast.dump(s) for s in ast.parse(code).body
            if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "_DRAFT_NOISE_SALT"
        ]

    assert salt(APPLIED) == salt(_upstream(GUMBEL))
    assert len(salt(APPLIED)) == 1


@pytest.mark.wheels
def test_a_drafts_position_is_salted_as_0_29_0_salts_it() -> None:
    def salting(code: str, definition: str) -> list[str]:
        return [
            ast.dump(n) for n in ast.walk(_definition(ast.parse(code), definition))
            if isinstance(n, ast.If) and ast.unparse(n.test) == "IS_DRAFTING"
        ]

    ours = salting(APPLIED, "gumbel_block_argmax")
    assert ours == salting(_upstream(GUMBEL), "gumbel_noised_argmax")
    assert len(ours) == 1


@pytest.mark.wheels
@pytest.mark.parametrize(
    "code,relative,definition,callee,keyword", FLAG_PASSED.values(), ids=FLAG_PASSED
)
def test_the_flag_is_passed_on_as_0_29_0_passes_it(
    code: str, relative: str, definition: str, callee: str, keyword: str
) -> None:
    ours = _passed(code, definition, callee, keyword)
    assert ours == _passed(_upstream(relative), definition, callee, keyword)
    assert len(ours) == 1
