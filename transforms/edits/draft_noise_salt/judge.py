"""Fix: a draft's Gumbel noise is a stream of its own, not verification's.

Three files, one declaration each, all under the name draft-noise-salt.

`GUMBEL_STREAMS`, vllm/v1/worker/gpu/sample/gumbel.py:

salt
    Right after the module-level `_TL_RAND_MIN = ...` it defines
    `_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)`.
    That must be the name's only definition: another, anywhere in the
    module (under an `if` too), is drift. 0.29.0's own, in that place, is
    the same statement, and counts as the fix's.
gumbel_block_argmax, _gumbel_sample_kernel, gumbel_sample
    Each must be 0.27.1's function, by meaning. Each takes a drafting flag
    (`IS_DRAFTING: tl.constexpr = False` for the Triton ones,
    `is_drafting: bool = False` for `gumbel_sample`) and passes it on;
    `gumbel_block_argmax` adds the salt to the position it keys the noise
    with when it is set. False is 0.27.1's draw exactly, so every caller
    that does not pass it (the target's sampler, the rejection sampler's
    resample) is unchanged.

`DRAFT_SAMPLING`, vllm/v1/worker/gpu/spec_decode/speculator.py: in
`DraftModelSpeculator.sample_draft` (0.27.1's, by meaning) the draw passes
`is_drafting=True`. DFlash1, EAGLE and MTP draft through it.

`DSPARK_SAMPLING`, vllm/v1/worker/gpu/spec_decode/dspark/speculator.py: in
`DSparkSpeculator._sample_sequential`, the `gumbel_sample(...)` draw passes
`is_drafting=True`.

Why: with `draft_sample_method="probabilistic"`, 0.27.1 draws a proposal
with the Gumbel noise keyed by the same (seed, position) that verification
resamples with after a rejection. Verification is a probability-ratio test,
not a Gumbel coupling: a residual draw correlated with the rejected
proposal biases the output (upstream measured chi-square 1584.9 against a
threshold of 69.8). Salting the draft's positions by 2**30 puts its draws
on a stream of their own; positions never come near 2**30.

Where: in vLLM's sampler, in upstream 0.29.0's shape, so every drafter that
samples is fixed, as upstream fixed them, and upstream's own unbiasedness
test (which calls `gumbel_sample(..., is_drafting=True)`) runs unchanged.
The DFlash2 walk (the project's dflash2/speculator.py) draws through the
spec's `gumbel_noised_argmax`, which this fix leaves exactly as the spec
writes it (the gumbel edit calls any other version drift): the walk adds
`_DRAFT_NOISE_SALT` to its own sampling position when gumbel.py has it,
which is the draw 0.29.0's `IS_DRAFTING=True` makes, and keeps 0.28.0's
draw where the fix is not applied.

The fix landed in vLLM 0.29.0 (seen by diffing the 0.28.0 and 0.29.0
wheels). Its pull request, #54282, is cited as upstream's history names it; vLLM's
source distributions do not mention it.

Reverted, each function and statement is 0.27.1's again, and the salt
goes; if other code in gumbel.py reads it, that is drift.
"""

from __future__ import annotations

from ...framework.edit import Edit, Fix, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles
from ...framework.judging import kept_while_used
from ...framework.names import Readers, binders
from ...framework.in_place import Run, judge_definition, judge_run
from ...framework.source import Found, Source
from ...framework.vocabulary import State

SALT = "_DRAFT_NOISE_SALT"
#: Each hunk's code, as 0.27.1 ships it and as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
_WHY = (
    "A draft's Gumbel noise is salted onto a stream of its own, as in vLLM "
    "0.29.0: drawn from the stream verification resamples with, probabilistic "
    "drafting biases the output."
)
SALT_HUNK = HUNKS.hunk(
    "draft noise salt",
    "module level, right after `_TL_RAND_MIN = ...`",
    _WHY,
)
BLOCK_ARGMAX = HUNKS.hunk(
    "gumbel_block_argmax salts a draft's position",
    "module level, `@triton.jit def gumbel_block_argmax`",
    _WHY,
)
SAMPLE_KERNEL = HUNKS.hunk(
    "_gumbel_sample_kernel passes the flag on",
    "module level, `@triton.jit def _gumbel_sample_kernel`",
    _WHY,
)
SAMPLE = HUNKS.hunk(
    "gumbel_sample takes is_drafting",
    "module level, `def gumbel_sample`",
    _WHY,
)
SAMPLE_DRAFT = HUNKS.hunk(
    "sample_draft draws as a draft",
    "DraftModelSpeculator.sample_draft",
    _WHY,
)
DSPARK_DRAW = HUNKS.hunk(
    "DSpark draws as a draft",
    "DSparkSpeculator._sample_sequential, its `gumbel_sample(...)` draw",
    _WHY,
)
FUNCTIONS = {
    BLOCK_ARGMAX.name: "gumbel_block_argmax",
    SAMPLE_KERNEL.name: "_gumbel_sample_kernel",
    SAMPLE.name: "gumbel_sample",
}


def judge_gumbel(source: Source) -> dict[str, Judged]:
    judged = {SALT_HUNK.name: _salt(source)}
    for hunk in (BLOCK_ARGMAX, SAMPLE_KERNEL, SAMPLE):
        name = FUNCTIONS[hunk.name]
        function = exactly_one(source.module.defs(name), f"one module-level function {name}")
        judged[hunk.name] = (
            function
            if isinstance(function, Judged)
            else judge_definition(source, function, hunk, f"`{name}`")
        )
    return judged


def _salt(source: Source) -> Judged:
    judged = judge_run(source, source.module, SALT_HUNK, "`_TL_RAND_MIN = ...` at module level")
    if judged.state is State.DRIFT:
        return judged
    # The salt the fix defines (or 0.29.0's, the same statement by meaning,
    # in its place) must be the only one: another definition, wherever it
    # stands, would decide the stream a draft draws from in its stead.
    ours = None
    if judged.state is State.APPLIED:
        assert isinstance(judged.site, Run)
        ours = source.at(judged.site.more[-1]).node
    others = [s for s in binders(source.tree, SALT) if s is not ours]
    if not others:
        return judged
    other = others[0]
    return drift(
        f"no `{SALT}` in the module but the one the fix defines after `_TL_RAND_MIN = ...`",
        f"{source.describe(other)} on line {other.lineno}, a definition the fix did not "
        "write; take it out, and the fix defines the salt",
    )


def before_undo_gumbel(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """The salt stays while code the revert keeps reads it."""
    salt = to_undo.get(SALT_HUNK.name)
    if salt is None:
        return {}
    leaving = [
        source.at(path).node
        for judged in to_undo.values()
        if judged.site is not None
        for path in judged.site.paths()
    ]
    readers = Readers(source).of(SALT, leaving)
    return kept_while_used(SALT_HUNK, SALT, readers)


def _method(source: Source, cls_name: str, name: str) -> Found | Judged:
    cls = exactly_one(source.module.classes(cls_name), f"one module-level class {cls_name}")
    if isinstance(cls, Judged):
        return cls
    return exactly_one(cls.defs(name), f"one method {cls_name}.{name}")


def judge_sample_draft(source: Source) -> dict[str, Judged]:
    method = _method(source, "DraftModelSpeculator", "sample_draft")
    if isinstance(method, Judged):
        return {SAMPLE_DRAFT.name: method}
    return {
        SAMPLE_DRAFT.name: judge_definition(
            source, method, SAMPLE_DRAFT, "`DraftModelSpeculator.sample_draft`"
        )
    }


def judge_dspark(source: Source) -> dict[str, Judged]:
    method = _method(source, "DSparkSpeculator", "_sample_sequential")
    if isinstance(method, Judged):
        return {DSPARK_DRAW.name: method}
    return {
        DSPARK_DRAW.name: judge_run(
            source,
            method,
            DSPARK_DRAW,
            "the `draft_sampled_i = gumbel_sample(...)` draw in "
            "DSparkSpeculator._sample_sequential",
            deep=True,
        )
    }


NAME = "draft-noise-salt"
FIX = Fix("#54282", "0.29.0")
GUMBEL_STREAMS = Edit(
    NAME,
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "gumbel_sample draws a draft on a noise stream of its own (is_drafting), "
    "as in vLLM 0.29.0",
    Role.SEAM,
    (SALT_HUNK, BLOCK_ARGMAX, SAMPLE_KERNEL, SAMPLE),
    judge_gumbel,
    writer="draft_noise_salt:GumbelStreams",
    before_undo=before_undo_gumbel,
    fix=FIX,
)
DRAFT_SAMPLING = Edit(
    NAME,
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
    "a draft model's probabilistic draft draws with is_drafting=True",
    Role.SEAM,
    (SAMPLE_DRAFT,),
    judge_sample_draft,
    writer="draft_noise_salt:DraftSampling",
    fix=FIX,
)
DSPARK_SAMPLING = Edit(
    NAME,
    "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py",
    "DSpark's probabilistic draft draws with is_drafting=True",
    Role.SEAM,
    (DSPARK_DRAW,),
    judge_dspark,
    writer="draft_noise_salt:DSparkSampling",
    fix=FIX,
)
