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

import textwrap

from ...framework.edit import Edit, Fix, Hunk, Judged, Role, drift, exactly_one
from ...framework.judging import kept_while_used
from ...framework.names import Readers, binders
from ...framework.in_place import Run, changed, judge_definition, judge_run
from ...framework.source import Found, Source
from ...framework.vocabulary import State

SALT = "_DRAFT_NOISE_SALT"
RAND_MIN_0271 = "_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10\n"
SALT_DEFINITION = f"""
# Added to a draft's sampling positions, so that its Gumbel noise is never
# the noise verification resamples with after rejecting it: verification is
# a probability-ratio test, and a proposal correlated with the residual draw
# biases the output. Positions never come near 2**30.
{SALT} = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)
"""

#: 0.27.1's functions, as the wheel has them.
BLOCK_ARGMAX_0271 = """\
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
    processed_logits_ptr,
    processed_logits_stride,
    processed_logits_col_ptr,
    vocab_size,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
    PER_TOKEN_COL: tl.constexpr = False,
):
    req_state_idx = tl.load(expanded_idx_mapping_ptr + token_idx).to(tl.int64)
    is_valid_req = req_state_idx >= 0
    temp = tl.load(temp_ptr + req_state_idx, mask=is_valid_req, other=0.0).to(
        tl.float32
    )
    if temp != 0.0 and APPLY_TEMPERATURE:
        # Apply temperature.
        # NOTE(woosuk): Match the behavior of _temperature_kernel.
        # E.g., if the kernel uses tl.div_rn, we should use tl.div_rn here too.
        logits = logits / temp

    if processed_logits_ptr is not None:
        # Store the temperature-applied logits.
        if processed_logits_col_ptr is not None:
            if PER_TOKEN_COL:
                col = tl.load(processed_logits_col_ptr + token_idx)
            else:
                col = tl.load(processed_logits_col_ptr)
        else:
            col = 0
        tl.store(
            processed_logits_ptr
            + req_state_idx * processed_logits_stride
            + col * vocab_size
            + block,
            logits,
            mask=mask & is_valid_req,
        )

    # fp32 is the default reduction dtype; fp64 is ~1/32–1/64x the throughput
    # on H100/Ada/Blackwell and empirically indistinguishable for Gumbel-max.
    if USE_FP64:
        logits = logits.to(tl.float64)
    if temp != 0.0:
        # Calculate the seed for gumbel noise.
        seed = tl.load(seeds_ptr + req_state_idx, mask=is_valid_req, other=0)
        pos = tl.load(pos_ptr + token_idx)
        gumbel_seed = tl.randint(seed, pos)

        if USE_FP64:
            u = tl_rand64(gumbel_seed, block, includes_zero=False)
            gumbel_noise = -tl.log(-tl.log(u))
        else:
            u = tl_rand32(gumbel_seed, block, includes_zero=False)
            # Draw the large-noise tail (which decides the argmax winner) from u -> 0,
            # where fp32 has fine resolution, instead of u -> 1, where fp32 spacing is
            # ~2**-24. The naive `-log(-log(u))` puts the winning tail at u -> 1,
            # hard-capping the noise at ~16.6 and coarsely quantizing it; using
            # `log1p(-u)` == `log(1 - u)` keeps the tail in the well-resolved region.
            # Note `1 - u` would lose precision for small u, so `log1p` is required.
            gumbel_noise = -tl.log(-tldevice.log1p(-u))

        # Apply gumbel noise.
        logits = tl.where(mask, logits + gumbel_noise, float("-inf"))

    value, idx = tl.max(logits, axis=0, return_indices=True)
    return value, idx
"""
SAMPLE_KERNEL_0271 = """\
@triton.jit
def _gumbel_sample_kernel(
    local_argmax_ptr,
    local_argmax_stride,
    local_max_ptr,
    local_max_stride,
    processed_logits_ptr,
    processed_logits_stride,
    processed_logits_col_ptr,
    logits_ptr,
    logits_stride,
    expanded_idx_mapping_ptr,
    seeds_ptr,
    pos_ptr,
    temp_ptr,
    vocab_size,
    BLOCK_SIZE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
    PER_TOKEN_COL: tl.constexpr,
):
    token_idx = tl.program_id(0).to(tl.int64)
    block_idx = tl.program_id(1)
    block = block_idx * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = block < vocab_size
    logits = tl.load(
        logits_ptr + token_idx * logits_stride + block,
        mask=mask,
        other=float("-inf"),
    )
    logits = logits.to(tl.float32)

    value, idx = gumbel_block_argmax(
        logits,
        block,
        mask,
        token_idx,
        expanded_idx_mapping_ptr,
        temp_ptr,
        seeds_ptr,
        pos_ptr,
        processed_logits_ptr,
        processed_logits_stride,
        processed_logits_col_ptr,
        vocab_size,
        APPLY_TEMPERATURE=APPLY_TEMPERATURE,
        USE_FP64=USE_FP64,
        PER_TOKEN_COL=PER_TOKEN_COL,
    )
    token_id = block_idx * BLOCK_SIZE + idx
    tl.store(local_argmax_ptr + token_idx * local_argmax_stride + block_idx, token_id)
    tl.store(local_max_ptr + token_idx * local_max_stride + block_idx, value)
"""
SAMPLE_0271 = """\
def gumbel_sample(
    logits: torch.Tensor,  # [num_tokens, vocab_size]
    expanded_idx_mapping: torch.Tensor,  # [num_tokens]
    temperature: torch.Tensor,  # [max_num_reqs]
    seed: torch.Tensor,  # [max_num_reqs]
    pos: torch.Tensor,  # [num_tokens]
    apply_temperature: bool,
    output_processed_logits: torch.Tensor | None = None,
    output_processed_logits_col: torch.Tensor | None = None,
    use_fp64: bool = False,
) -> torch.Tensor:
    # Enforce contiguity on non-strided input tensors
    expanded_idx_mapping = expanded_idx_mapping.contiguous()
    pos = pos.contiguous()
    if output_processed_logits_col is not None:
        output_processed_logits_col = output_processed_logits_col.contiguous()
    num_tokens, vocab_size = logits.shape
    BLOCK_SIZE = 1024
    num_blocks = triton.cdiv(vocab_size, BLOCK_SIZE)
    local_argmax = logits.new_empty(num_tokens, num_blocks, dtype=torch.int64)
    local_max_dtype = torch.float64 if use_fp64 else torch.float32
    local_max = logits.new_empty(num_tokens, num_blocks, dtype=local_max_dtype)
    per_token_col = (
        output_processed_logits_col is not None
        and output_processed_logits_col.dim() > 0
    )
    _gumbel_sample_kernel[(num_tokens, num_blocks)](
        local_argmax,
        local_argmax.stride(0),
        local_max,
        local_max.stride(0),
        output_processed_logits,
        output_processed_logits.stride(0) if output_processed_logits is not None else 0,
        output_processed_logits_col,
        logits,
        logits.stride(0),
        expanded_idx_mapping,
        seed,
        pos,
        temperature,
        vocab_size,
        BLOCK_SIZE=BLOCK_SIZE,
        APPLY_TEMPERATURE=apply_temperature,
        USE_FP64=use_fp64,
        PER_TOKEN_COL=per_token_col,
    )
    # NOTE(woosuk): Use int64 for later indexing.
    max_block_idx = local_max.argmax(dim=-1, keepdim=True)
    sampled = local_argmax.gather(dim=-1, index=max_block_idx).view(-1)
    return sampled
"""
SAMPLE_DRAFT_0271 = """\
def sample_draft(
    self,
    hidden_states: torch.Tensor,
    positions: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    draft_step: torch.Tensor,
    draft_logits: torch.Tensor | None,
) -> torch.Tensor:
    if draft_logits is not None:
        logits = self.model.compute_logits(hidden_states)
        # NOTE(woosuk): We must add 1 to the positions to match the Gumbel noise
        # used for draft and target sampling.
        return gumbel_sample(
            logits,
            idx_mapping,
            temperature,
            seeds,
            positions + 1,
            apply_temperature=True,
            output_processed_logits=draft_logits,
            output_processed_logits_col=draft_step,
            use_fp64=self.use_fp64_gumbel,
        )
    return self._greedy_sample_draft(hidden_states)
"""
DSPARK_DRAW_0271 = """\
draft_sampled_i = gumbel_sample(
    logits_i,
    idx_map[:, i],
    self.temperature,
    self.seeds,
    sample_pos[:, i] - 1,
    apply_temperature=True,
    output_processed_logits=self.draft_logits,
    output_processed_logits_col=self._step_cols[i],
    use_fp64=self.use_fp64_gumbel,
)
"""


BLOCK_ARGMAX_FIXED = changed(
    BLOCK_ARGMAX_0271,
    (
        "    PER_TOKEN_COL: tl.constexpr = False,\n):",
        "    PER_TOKEN_COL: tl.constexpr = False,\n    IS_DRAFTING: tl.constexpr = False,\n):",
    ),
    (
        "        pos = tl.load(pos_ptr + token_idx)\n",
        "        pos = tl.load(pos_ptr + token_idx)\n"
        "        if IS_DRAFTING:\n"
        "            # A draft draws on a stream of its own (see _DRAFT_NOISE_SALT).\n"
        f"            pos = pos + {SALT}\n",
    ),
)
SAMPLE_KERNEL_FIXED = changed(
    SAMPLE_KERNEL_0271,
    (
        "    PER_TOKEN_COL: tl.constexpr,\n):",
        "    PER_TOKEN_COL: tl.constexpr,\n    IS_DRAFTING: tl.constexpr = False,\n):",
    ),
    (
        "        PER_TOKEN_COL=PER_TOKEN_COL,\n    )",
        "        PER_TOKEN_COL=PER_TOKEN_COL,\n        IS_DRAFTING=IS_DRAFTING,\n    )",
    ),
)
SAMPLE_FIXED = changed(
    SAMPLE_0271,
    (
        "    use_fp64: bool = False,\n) -> torch.Tensor:",
        "    use_fp64: bool = False,\n    is_drafting: bool = False,\n) -> torch.Tensor:",
    ),
    (
        "        PER_TOKEN_COL=per_token_col,\n    )",
        "        PER_TOKEN_COL=per_token_col,\n        IS_DRAFTING=is_drafting,\n    )",
    ),
)
_DRAFTING = (
    "    use_fp64=self.use_fp64_gumbel,\n",
    "    use_fp64=self.use_fp64_gumbel,\n"
    "    # Noise of its own, not the stream verification resamples with.\n"
    "    is_drafting=True,\n",
)
SAMPLE_DRAFT_FIXED = changed(
    SAMPLE_DRAFT_0271, tuple(textwrap.indent(s, "    " * 2) for s in _DRAFTING)  # type: ignore[arg-type]
)
DSPARK_DRAW_FIXED = changed(DSPARK_DRAW_0271, _DRAFTING)

_WHY = (
    "A draft's Gumbel noise is salted onto a stream of its own, as in vLLM "
    "0.29.0: drawn from the stream verification resamples with, probabilistic "
    "drafting biases the output."
)
SALT_HUNK = Hunk(
    "draft noise salt",
    "module level, right after `_TL_RAND_MIN = ...`",
    RAND_MIN_0271,
    RAND_MIN_0271 + SALT_DEFINITION,
    _WHY,
)
BLOCK_ARGMAX = Hunk(
    "gumbel_block_argmax salts a draft's position",
    "module level, `@triton.jit def gumbel_block_argmax`",
    BLOCK_ARGMAX_0271,
    BLOCK_ARGMAX_FIXED,
    _WHY,
)
SAMPLE_KERNEL = Hunk(
    "_gumbel_sample_kernel passes the flag on",
    "module level, `@triton.jit def _gumbel_sample_kernel`",
    SAMPLE_KERNEL_0271,
    SAMPLE_KERNEL_FIXED,
    _WHY,
)
SAMPLE = Hunk(
    "gumbel_sample takes is_drafting",
    "module level, `def gumbel_sample`",
    SAMPLE_0271,
    SAMPLE_FIXED,
    _WHY,
)
SAMPLE_DRAFT = Hunk(
    "sample_draft draws as a draft",
    "DraftModelSpeculator.sample_draft",
    SAMPLE_DRAFT_0271,
    SAMPLE_DRAFT_FIXED,
    _WHY,
)
DSPARK_DRAW = Hunk(
    "DSpark draws as a draft",
    "DSparkSpeculator._sample_sequential, its `gumbel_sample(...)` draw",
    DSPARK_DRAW_0271,
    DSPARK_DRAW_FIXED,
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
