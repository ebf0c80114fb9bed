"""Edit 1, causality: a DFlash draft's top-level `is_causal` decides first.

Target: the module-level function `_dflash_layer_causal(config, layer_idx)` of
the DFlash1 model. In 0.27.1 it reads only `dflash_config.causal` and
otherwise infers causality from the layer type:

    override = (getattr(config, "dflash_config", None) or {}).get("causal")
    if override is not None:
        return override
    layer_types = getattr(config, "layer_types", None)
    return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION

The edit puts a top-level `config.is_causal` in front (returned as
`bool(...)`), makes the `dflash_config.causal` override a `bool(...)` too,
keeps the layer-type fallback as it is and rewords the docstring.

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

import libcst as cst

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    exactly_one,
    pending,
    replaced,
)
from ._meaning import (
    code_statements,
    find_all,
    function_of,
    meaning,
    opens_with_docstring,
    same_meaning,
    signature_difference,
    statements_difference,
)
from ._names import named
from .hunks import CAUSAL_FUNCTION as FUNCTION
from .hunks import CAUSALITY

(HUNK,) = CAUSALITY.hunks
OLD_FUNCTION, NEW_FUNCTION = HUNK.before, HUNK.after

# What the edit writes in front of the override: the new docstring and the
# `is_causal` check, exactly as in NEW_FUNCTION.
INTRO = '''\
"""Resolve explicit causality before falling back to legacy layer defaults."""
is_causal = getattr(config, "is_causal", None)
if is_causal is not None:
    return bool(is_causal)
'''
# And what the override's `if` returns instead of the raw value.
OVERRIDE_RESULT = "bool(override)"

# What a revert puts back: 0.27.1's docstring and the raw override, exactly
# as in OLD_FUNCTION.
OLD_DOCSTRING = '''\
"""``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
'''
OLD_OVERRIDE_RESULT = "override"

_REMEDY = "bring it back to 0.27.1's or apply the causality change by hand"


def _difference(found: cst.FunctionDef) -> str:
    """Where `found` departs from the nearer of the two known versions."""
    old, new = function_of(OLD_FUNCTION), function_of(NEW_FUNCTION)
    header = signature_difference(found, old)
    if header is not None:
        return f"{header}; {_REMEDY}"
    body = code_statements(found)

    def shared(reference: cst.FunctionDef) -> int:
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
    difference = statements_difference(
        body, code_statements(reference), name, limit=200
    )
    return f"{difference or 'its body'}; {_REMEDY}"


class Causality(BackportCodemod):
    SPEC = CAUSALITY

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        function = exactly_one(
            named(tree.body, cst.FunctionDef, FUNCTION),
            f"one module-level function {FUNCTION}(config, layer_idx)",
        )
        if isinstance(function, Judged):
            return {HUNK.name: function}
        found = meaning(function)
        if found == meaning(NEW_FUNCTION):
            return {HUNK.name: applied(function)}
        if found == meaning(OLD_FUNCTION):
            return {HUNK.name: pending(function)}
        return {
            HUNK.name: drift(
                f"{FUNCTION} as in 0.27.1 or as the causality edit leaves it",
                _difference(function),
            )
        }

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        function = sites[HUNK.name]
        return self._with_body(tree, function, self._edited_body(function))

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        function = sites[HUNK.name]
        return self._with_body(tree, function, self._reverted_body(function))

    @staticmethod
    def _with_body(
        tree: cst.Module, function: cst.FunctionDef, body: cst.IndentedBlock
    ) -> cst.Module:
        new_function = function.with_changes(body=body)
        return tree.with_changes(body=replaced(tree.body, function, new_function))

    def _edited_body(self, function: cst.FunctionDef) -> cst.IndentedBlock:
        block = function.body
        # 0.27.1's meaning has an `if` in the body, so it is an indented block.
        assert isinstance(block, cst.IndentedBlock)
        body = list(block.body)
        intro = self.statements(INTRO)

        first = body[0]
        if opens_with_docstring(first):
            # The old docstring gives way to the new one; comments above it stay.
            intro[0] = intro[0].with_changes(leading_lines=first.leading_lines)
            if len(first.body) == 1:
                body.pop(0)
            else:
                body[0] = first.with_changes(body=first.body[1:])

        # The override's `if` is the only compound statement before the
        # fallback; only its returned value changes, so comments in it survive.
        index = next(i for i, s in enumerate(body) if isinstance(s, cst.If))
        override = body[index]
        (result,) = find_all(override.body, lambda n: isinstance(n, cst.Return))
        assert isinstance(result, cst.Return)
        body[index] = override.deep_replace(
            result,
            result.with_changes(
                value=cst.parse_expression(
                    OVERRIDE_RESULT, config=self.module.config_for_parsing
                ),
                whitespace_after_return=cst.SimpleWhitespace(" "),
            ),
        )
        return block.with_changes(body=[*intro, *body])

    def _reverted_body(self, function: cst.FunctionDef) -> cst.IndentedBlock:
        """The edited body as 0.27.1 has it: `_edited_body` undone."""
        block = function.body
        # The edited meaning has two `if`s in the body: an indented block.
        assert isinstance(block, cst.IndentedBlock)
        body = list(block.body)
        # By meaning the body is the docstring (if any), the `is_causal`
        # assignment and its `if`, then 0.27.1's statements: the first `if` is
        # the `is_causal` check, and whatever precedes it is the intro.
        check, override_at = (i for i, s in enumerate(body) if isinstance(s, cst.If))
        intro, kept = body[: check + 1], body[check + 1 :]
        override_at -= check + 1

        # 0.27.1's docstring takes the place of the intro; comments above the
        # new docstring stay, the intro's other lines go with it.
        docstring = self.statement(OLD_DOCSTRING)
        if opens_with_docstring(intro[0]):
            docstring = docstring.with_changes(leading_lines=intro[0].leading_lines)

        # The override's `if` gets its raw value back, in the parentheses the
        # `bool(...)` stood in; comments in it survive.
        override = kept[override_at]
        (result,) = find_all(override.body, lambda n: isinstance(n, cst.Return))
        assert isinstance(result, cst.Return) and result.value is not None
        raw = cst.parse_expression(
            OLD_OVERRIDE_RESULT, config=self.module.config_for_parsing
        )
        raw = raw.with_changes(lpar=result.value.lpar, rpar=result.value.rpar)
        kept[override_at] = override.deep_replace(
            result, result.with_changes(value=raw)
        )
        return block.with_changes(body=[docstring, *kept])
