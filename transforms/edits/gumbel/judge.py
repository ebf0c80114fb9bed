"""Edit 5, gumbel: the Gumbel-max draw as a Triton function of its own.

Target: vllm/v1/worker/gpu/sample/gumbel.py, one hunk.

gumbel_noised_argmax
    Must be there: a module-level `@triton.jit def gumbel_block_argmax`, and
    the module-level names the new function uses: `tl`, `tldevice`, `triton`,
    `tl_rand32` and `tl_rand64`.
    Inserts, right before it:
        @triton.jit
        def gumbel_noised_argmax(logits, keys, mask, seed, pos, temp,
                                 USE_FP64: tl.constexpr,
                                 APPLY_TEMPERATURE: tl.constexpr = True)
    Applied when a module-level `gumbel_noised_argmax` with the spec's meaning
    is there, decorator included and docstring excluded; one with another body
    is drift, never "done".

Why: the DFlash2 selector walks one path through the drafted candidates and
has to draw the same Gumbel noise for a token that verification will draw, so
it needs the noised argmax as a callable keyed by (seed, pos, keys).

`gumbel_block_argmax` is deliberately left as it is. Upstream also rewrites it
to call the new function, but 0.27.1's copy differs from the one that change
was written against, and rewriting a hot sampling kernel only to deduplicate
it is not worth the risk. The two copies compute the same draw.

Reverted, the function goes and what followed it takes back the blank lines
it took; if other code in the file calls it (upstream's `gumbel_block_argmax`
does), that is drift: removing it would break the module.
"""

from __future__ import annotations

import ast
import dataclasses

from ...framework.edit import Edit, Judged, Role, Site, applied, drift, pending
from ...framework.hunk_files import HunkFiles
from ...framework.judging import is_attribute, kept_while_used, other_version
from ...framework.names import Readers, module_bindings
from ...framework.source import Path, Source

NAME = "gumbel_noised_argmax"
ANCHOR = "gumbel_block_argmax"
#: Module-level names the new function's body reads.
NEEDS = ("tl", "tldevice", "triton", "tl_rand32", "tl_rand64")
#: The function as the edit inserts it: hunks/gumbel_noised_argmax/.
HUNKS = HunkFiles(__package__)

HUNK = HUNKS.hunk(
    NAME,
    f"module level, right before `@triton.jit def {ANCHOR}`",
    "`gumbel_noised_argmax` lets the selector's walk draw the same Gumbel noise "
    "as verification does.",
)
GUMBEL_NOISED_ARGMAX = HUNK.after


@dataclasses.dataclass(kw_only=True, eq=False)
class Functions(Site):
    """Applied: the function, and any further definition of it, to remove."""

    more: tuple[Path, ...] = ()


def _jitted(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # `@triton.jit(...)` with options is just as much a Triton function.
    return any(
        is_attribute(d, "triton", "jit")
        or (isinstance(d, ast.Call) and is_attribute(d.func, "triton", "jit"))
        for d in function.decorator_list
    )


def judge(source: Source) -> dict[str, Judged]:
    existing = source.module.defs(NAME)
    refused = other_version(existing, HUNK.after, f"`{NAME}` as the spec writes it")
    if refused is not None:
        return {HUNK.name: refused}
    if existing:
        first, *more = (f.pinned() for f in existing)
        return {HUNK.name: applied(Functions(path=first, more=tuple(more)))}

    anchors = source.module.defs(ANCHOR)
    problems = []
    if not anchors:
        problems.append(
            f"no module-level `{ANCHOR}` (renamed or removed?) to put `{NAME}` before"
        )
    elif len(anchors) > 1:
        problems.append(f"{len(anchors)} module-level `{ANCHOR}` definitions")
    elif not _jitted(anchors[0].node):  # type: ignore[arg-type]
        problems.append(f"`{ANCHOR}` without `@triton.jit`")
    bindings = module_bindings(source.tree.body)
    missing = [name for name in NEEDS if name not in bindings]
    if missing:
        problems.append(
            ", ".join(f"`{name}`" for name in missing)
            + " neither imported nor defined at module level, though "
            f"`{NAME}` uses " + ("it" if len(missing) == 1 else "them")
        )
    if problems:
        return {
            HUNK.name: drift(
                f"a module-level `@triton.jit def {ANCHOR}` to insert before, "
                "and module-level " + ", ".join(f"`{n}`" for n in NEEDS),
                "; ".join(problems),
            )
        }
    return {HUNK.name: pending(Site(path=anchors[0].pinned()))}


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """Other module code that calls the function would break without it."""
    leaving = [f.node for f in source.module.defs(NAME)]
    callers = Readers(source).of(NAME, leaving)
    return kept_while_used(HUNK, NAME, callers, verb="called")


GUMBEL = Edit(
    "gumbel",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "gumbel_noised_argmax: the Gumbel-max draw as a Triton function a "
    "draft walk can share with verification",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="gumbel:GumbelNoisedArgmax",
    before_undo=before_undo,
)
