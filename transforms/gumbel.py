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

import libcst as cst

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    insert_before,
    pending,
    removed,
)
from ._meaning import is_attribute
from ._names import Reads, module_bindings, named
from .hunks import GUMBEL
from .hunks import GUMBEL_ANCHOR as ANCHOR
from .hunks import GUMBEL_NAME as NAME
from .hunks import GUMBEL_NEEDS as NEEDS

(HUNK,) = GUMBEL.hunks


def _jitted(function: cst.FunctionDef) -> bool:
    # `@triton.jit(...)` with options is just as much a Triton function.
    return any(
        is_attribute(d.decorator, "triton", "jit")
        or (
            isinstance(d.decorator, cst.Call)
            and is_attribute(d.decorator.func, "triton", "jit")
        )
        for d in function.decorators
    )


class GumbelNoisedArgmax(BackportCodemod):
    SPEC = GUMBEL

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        existing = named(tree.body, cst.FunctionDef, NAME)
        expected = f"`{NAME}` as the spec writes it"
        refused = self.other_version(existing, HUNK.after, expected)
        if refused is not None:
            return {HUNK.name: refused}
        if existing:
            return {HUNK.name: applied(existing)}

        anchors = named(tree.body, cst.FunctionDef, ANCHOR)
        problems = []
        if not anchors:
            problems.append(
                f"no module-level `{ANCHOR}` (renamed or removed?) to put "
                f"`{NAME}` before"
            )
        elif len(anchors) > 1:
            problems.append(f"{len(anchors)} module-level `{ANCHOR}` definitions")
        elif not _jitted(anchors[0]):
            problems.append(f"`{ANCHOR}` without `@triton.jit`")
        bindings = module_bindings(tree.body)
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
        return {HUNK.name: pending(anchors[0])}

    def unsafe_to_undo(
        self, tree: cst.Module, to_undo: dict[str, Judged]
    ) -> dict[str, Judged]:
        """Other module code that calls the function would break without it."""
        if HUNK.name not in to_undo:
            return {}
        callers = Reads(tree).elsewhere(NAME, leaving=to_undo[HUNK.name].site)
        if not callers:
            return {}
        return {
            HUNK.name: drift(
                f"`{NAME}` called by nothing else in the module, so that it can go",
                f"it called by {', '.join(callers)} (removing it would break "
                + ("it" if len(callers) == 1 else "them")
                + ")",
            )
        }

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        new = self.statement(HUNK.after)
        body = insert_before(tree.body, sites[HUNK.name], [new], blank_lines=2)
        return tree.with_changes(body=body)

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        # What followed the function takes back the blank lines it took.
        return tree.with_changes(body=removed(tree.body, sites[HUNK.name]))
