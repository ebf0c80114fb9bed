"""Fix: block verification draws each draft step's uniform on a stream of
its own, and so does the DFlash2 walk for each draft step's noise.

Two files, one declaration each, both under the name spec-step-seed.

`STEP_SEED`, vllm/v1/worker/gpu/sample/gumbel.py: right after the
module-level `@triton.jit def tl_rand32` (0.27.1's, by meaning) it defines

    @triton.jit
    def spec_step_seed(seed, step):
        return seed ^ (tl.cast(step, tl.int64) << 32)

a request's seed with a draft step mixed into its high 32 bits, which
Philox keys its stream with. That must be the name's only definition in
the module.

`BLOCK_UNIFORM`, vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py:
the module imports `spec_step_seed` beside `gumbel_block_argmax` and
`tl_rand32` (in their statement; where the module imports them one name a
line, as isort's force-single-line leaves it, on a line of its own between
them), and in `_rejection_kernel` the acceptance uniform of draft
step `i`, `u = tl_rand32(seed, pos, includes_zero=False)`, is drawn with
`spec_step_seed(seed, i)` when `USE_BLOCK_VERIFICATION`, with `seed` as
before otherwise: standard verification's uniforms are 0.27.1's exactly.

Why: every draw of a request is keyed by its seed and a position. After a
block whose acceptance stopped short, the next step drafts again the
positions past the accepted ones, and verifies them with the uniforms keyed
by the same positions. Standard verification never looked at those: it
stops at the first rejection. Block verification (Sun et al., 2024, 0.27.1's
`rejection_sample_method="block"`) decides the accepted length from every
step's uniform, so the ones past it already took part in a decision (each
was above its threshold), and drawn again they bias the output. The DFlash2
walk's noise for a re-drafted position is reused the same way, and the
proposal it makes took part too. vLLM 0.33.0 mixes the draft step into the
seed of both draws (and of the draft-logit-cached draws of
`gumbel_block_argmax`); a position is drafted again only at a smaller step
than before, so no stream is drawn twice.

The DFlash2 walk lives in this tool's dflash2/speculator.py, the same bytes
whichever edit set the tree holds: it mixes the step in with
`spec_step_seed` where gumbel.py has it, and draws on the request's seed, as
0.28.0's walk does, where it does not (`apply --only-pr`).

Not carried: 0.33.0 also mixes the step into `gumbel_block_argmax`'s draws
that cache draft logits (probabilistic DFlash1, EAGLE, MTP and DSpark
drafts). That function is the draft-noise-salt fix's, rewritten whole, so
DFlash1 with block verification keeps re-drafted positions' noise.

Reverted, the import and the draw are 0.27.1's again, and the function goes;
if other code in gumbel.py reads it, that is drift.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles
from ...framework.judging import kept_while_used
from ...framework.names import Readers, binders
from ...framework.in_place import Run, judge_run, judge_run_as
from ...framework.source import Source
from ...framework.vocabulary import State

NAME = "spec_step_seed"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
# isort's force-single-line, ruff's too, writes that import one name a line,
# and puts the fix's name in its sorted place among them: a fork formatted so
# gets the fix in its own style.
IMPORT_ONE_A_LINE = tuple(
    "".join(f"from vllm.v1.worker.gpu.sample.gumbel import {name}\n" for name in names)
    for names in (("gumbel_block_argmax", "tl_rand32"), ("gumbel_block_argmax", NAME, "tl_rand32"))
)

_WHY = (
    "Block verification draws each draft step's acceptance uniform, and the "
    "DFlash2 walk each step's noise, on a stream of its own, as in vLLM "
    "0.33.0: a position drafted again after a truncated block reuses draws "
    "that already decided, which biases the output."
)
STEP_SEED_HUNK = HUNKS.hunk(
    "spec_step_seed",
    "module level, right after `@triton.jit def tl_rand32`",
    _WHY,
)
IMPORT_HUNK = HUNKS.hunk(
    "imports spec_step_seed",
    "module level, `from vllm.v1.worker.gpu.sample.gumbel import ...`",
    _WHY,
)
UNIFORM_HUNK = HUNKS.hunk(
    "block verification's uniform per step",
    "_rejection_kernel, its `u = tl_rand32(seed, pos, includes_zero=False)`",
    _WHY,
)


def judge_gumbel(source: Source) -> dict[str, Judged]:
    judged = judge_run(source, source.module, STEP_SEED_HUNK, "`tl_rand32` at module level")
    if judged.state is State.DRIFT:
        return {STEP_SEED_HUNK.name: judged}
    ours = None
    if judged.state is State.APPLIED:
        assert isinstance(judged.site, Run)
        ours = source.at(judged.site.more[-1]).node
    others = [s for s in binders(source.tree, NAME) if s is not ours]
    if others:
        other = others[0]
        judged = drift(
            f"no `{NAME}` in the module but the one the fix defines after `tl_rand32`",
            f"{source.describe(other)} on line {other.lineno}, a definition the fix did "
            "not write; take it out, and the fix defines it",
        )
    return {STEP_SEED_HUNK.name: judged}


def before_undo_gumbel(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """The function stays while code the revert keeps calls it."""
    judged = to_undo.get(STEP_SEED_HUNK.name)
    if judged is None or judged.site is None:
        return {}
    leaving = [source.at(path).node for path in judged.site.paths()]
    readers = Readers(source).of(NAME, leaving)
    return kept_while_used(STEP_SEED_HUNK, NAME, readers)


def judge_rejection(source: Source) -> dict[str, Judged]:
    judged = {IMPORT_HUNK.name: _import(source)}
    kernel = exactly_one(
        source.module.defs("_rejection_kernel"), "one module-level function _rejection_kernel"
    )
    if isinstance(kernel, Judged):
        judged[UNIFORM_HUNK.name] = kernel
        return judged
    uniform = judge_run(
        source,
        kernel,
        UNIFORM_HUNK,
        "the acceptance uniform `u = tl_rand32(seed, pos, includes_zero=False)` "
        "in _rejection_kernel",
        deep=True,
    )
    if uniform.state is not State.DRIFT:
        uniform = _names_the_draw_reads(source, kernel.node) or uniform  # type: ignore[arg-type]
    judged[UNIFORM_HUNK.name] = uniform
    return judged


def _import(source: Source) -> Judged:
    judged = judge_run(
        source,
        source.module,
        IMPORT_HUNK,
        "`from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32` "
        "at module level, in one statement or one name a line",
    )
    if judged.state is not State.DRIFT:
        return judged
    return judge_run_as(source, source.module, *IMPORT_ONE_A_LINE) or judged


def _names_the_draw_reads(source: Source, kernel: ast.FunctionDef) -> Judged | None:
    """The fixed draw reads `i` as the draft step and USE_BLOCK_VERIFICATION
    as the kernel's switch: in a kernel that names them otherwise it would
    read an unbound name, or another value."""
    expected = (
        "the uniform drawn inside `for i in range(...)`, `i` the draft step, in a "
        "_rejection_kernel with the parameter USE_BLOCK_VERIFICATION, as in vLLM 0.27.1"
    )
    parameters = [a.arg for a in kernel.args.args + kernel.args.kwonlyargs]
    if "USE_BLOCK_VERIFICATION" not in parameters:
        return drift(expected, "no parameter USE_BLOCK_VERIFICATION")
    draws = [
        node for node in ast.walk(kernel)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name) and node.value.func.id == "tl_rand32"
        and [ast.unparse(t) for t in node.targets] == ["u"]
    ]
    loops = [
        loop for loop in ast.walk(kernel)
        if isinstance(loop, ast.For) and any(d in ast.walk(loop) for d in draws)
    ]
    # ast.walk goes breadth first: the last loop around the draw is the innermost.
    loop = loops[-1] if loops else None
    if loop is None or not (isinstance(loop.target, ast.Name) and loop.target.id == "i"):
        found = (f"the loop around it is `for {ast.unparse(loop.target)} in ...`"
                 if loop is not None else "no loop around it")
        return drift(expected, found)
    return None


FIX = Fix("", "0.33.0")
STEP_SEED = Edit(
    "spec-step-seed",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "spec_step_seed: a request's seed with a draft step mixed in, as in vLLM 0.33.0",
    Role.SEAM,
    (STEP_SEED_HUNK,),
    judge_gumbel,
    writer="spec_step_seed:StepSeed",
    before_undo=before_undo_gumbel,
    fix=FIX,
)
BLOCK_UNIFORM = Edit(
    "spec-step-seed",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
    "block verification draws each draft step's uniform with spec_step_seed, "
    "as in vLLM 0.33.0",
    Role.SWITCH,
    (IMPORT_HUNK, UNIFORM_HUNK),
    judge_rejection,
    writer="spec_step_seed:BlockUniform",
    fix=FIX,
)
