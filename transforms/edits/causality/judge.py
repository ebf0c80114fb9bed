"""Edit 1, causality: a DFlash draft's top-level `is_causal` decides first.

Target: the module-level function `_dflash_layer_causal(config, layer_idx)` of
the DFlash1 model. In 0.27.1 it reads only `dflash_config.causal` and
otherwise infers causality from the layer type. The edit puts a top-level
`config.is_causal` in front (returned as `bool(...)`), makes the
`dflash_config.causal` override a `bool(...)` too, keeps the layer-type
fallback as it is and rewords the docstring.

Why: a DFlash2 config states `is_causal` at the top level, and every layer of
such a checkpoint is `sliding_attention`, which the layer-type inference calls
causal -- the opposite of what a block-diffusion drafter needs, and a silently
worse draft rather than an error.

The whole function is judged, not just its first lines: it is pending only if
it means what 0.27.1's does, applied only if it means what the edited one
does. Anything else -- a changed fallback, a different signature, another
override -- is drift, because inserting the new lines there would silently
combine the spec's rules with someone else's.

Reverted, an edited function loses the `is_causal` lines and gets 0.27.1's
docstring and raw `return override` back; every other line stays as written.
"""

from __future__ import annotations

import ast
import dataclasses

from ...framework.edit import Edit, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles
from ...framework.meaning import (
    code_statements,
    function_of,
    meaning,
    same_meaning,
    signature_difference,
    statements_difference,
)
from ...framework.source import Found, Path, Source

FUNCTION = "_dflash_layer_causal"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
OLD_FUNCTION = HUNKS.shipped("is_causal first")
NEW_FUNCTION = HUNKS.patched("is_causal first")

HUNK = HUNKS.hunk(
    "is_causal first",
    f"the module-level function {FUNCTION}, judged whole",
    "A DFlash2 config states `is_causal` at the top level; 0.27.1 would infer "
    '"causal" from its sliding-window layers, a silently worse draft.',
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Causal(Site):
    """The function; the `if` that returns the `dflash_config.causal`
    override and that `return`; and, applied, the `if` that returns
    `is_causal`."""

    within = True

    override: Path
    override_return: Path
    is_causal: Path | None = None


_REMEDY = "bring it back to 0.27.1's or apply the causality change by hand"


def judge(source: Source) -> dict[str, Judged]:
    function = exactly_one(
        source.module.defs(FUNCTION),
        f"one module-level function {FUNCTION}(config, layer_idx)",
    )
    if isinstance(function, Judged):
        return {HUNK.name: function}
    found = meaning(function.node)
    if found == meaning(NEW_FUNCTION):
        return {HUNK.name: applied(_site(function, ifs=2))}
    if found == meaning(OLD_FUNCTION):
        return {HUNK.name: pending(_site(function, ifs=1))}
    return {
        HUNK.name: drift(
            f"{FUNCTION} as in 0.27.1 or as the causality edit leaves it",
            _difference(function.node),  # type: ignore[arg-type]
        )
    }


def _site(function: Found, ifs: int) -> Causal:
    # By meaning, the function's `if`s are the is_causal check (edited only)
    # and the override, in that order.
    *check, override = [s for s in function.statements() if isinstance(s.node, ast.If)]
    assert len(check) == ifs - 1
    return Causal(
        path=function.pinned(),
        override=override.path,
        override_return=override.statements()[0].path,
        is_causal=check[0].path if check else None,
    )


def _difference(found: ast.FunctionDef) -> str:
    """Where `found` departs from the nearer of the two known versions."""
    old, new = function_of(OLD_FUNCTION), function_of(NEW_FUNCTION)
    header = signature_difference(found, old)
    if header is not None:
        return f"{header}; {_REMEDY}"
    body = code_statements(found)

    def shared(reference: ast.FunctionDef) -> int:
        count = 0
        for have, want in zip(body, code_statements(reference)):
            if not same_meaning(have, want):
                break
            count += 1
        return count

    # Report against whichever version the function follows longer.
    name, reference = max(
        (("0.27.1", old), ("the edited function", new)), key=lambda c: shared(c[1])
    )
    # Whole statements: the fallback's one line is what usually differs.
    difference = statements_difference(body, code_statements(reference), name, limit=200)
    return f"{difference or 'its body'}; {_REMEDY}"


CAUSALITY = Edit(
    "causality",
    "vllm/model_executor/models/qwen3_dflash.py",
    "_dflash_layer_causal honours a top-level is_causal before "
    "dflash_config.causal and the layer-type fallback",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="causality:Causality",
)
