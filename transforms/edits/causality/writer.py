"""Writes the causality edit: the `is_causal` lines in front of the
override, and the override returned as `bool(...)`; backwards, 0.27.1's
docstring and the raw override again. Every other line stays as written."""

from __future__ import annotations

import libcst as cst

from .judge import CAUSALITY, Causal
from ...framework.edit import Hunk, Site
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate

# What the edit writes in front of the override: the new docstring and the
# `is_causal` check, exactly as in the edited function.
INTRO = '''\
"""Resolve explicit causality before falling back to legacy layer defaults."""
is_causal = getattr(config, "is_causal", None)
if is_causal is not None:
    return bool(is_causal)
'''
# And what the override's `if` returns instead of the raw value.
OVERRIDE_RESULT = "bool(override)"
# What a revert puts back: 0.27.1's docstring and the raw override.
OLD_DOCSTRING = '''\
"""``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
'''
OLD_OVERRIDE_RESULT = "override"


def opens_with_docstring(statement: cst.CSTNode) -> bool:
    """Whether the line starts with a docstring, alone or before `; more`."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and bool(statement.body)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


class Causality(Writer):
    EDIT = CAUSALITY

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Causal)
        function, override = locate(tree, site.path), locate(tree, site.override)
        result = locate(tree, site.override_return).node
        assert isinstance(function.node, cst.FunctionDef) and isinstance(result, cst.Return)
        block = function.node.body
        body = list(block.body)
        intro = self.statements(INTRO)
        first = body[0]
        if opens_with_docstring(first):
            # The old docstring gives way to the new one; comments above it stay.
            assert isinstance(first, cst.SimpleStatementLine)
            intro[0] = intro[0].with_changes(leading_lines=first.leading_lines)
            if len(first.body) == 1:
                body.pop(0)
            else:
                body[0] = first.with_changes(body=first.body[1:])
        # Only the override's returned value changes, so comments in it survive.
        at = next(i for i, s in enumerate(body) if s is override.statement)
        body[at] = override.node.deep_replace(
            result,
            result.with_changes(
                value=self.expression(OVERRIDE_RESULT),
                whitespace_after_return=cst.SimpleWhitespace(" "),
            ),
        )
        return function.replaced(function.node.with_changes(body=block.with_changes(body=[*intro, *body])))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Causal) and site.is_causal is not None
        function, override = locate(tree, site.path), locate(tree, site.override)
        check = locate(tree, site.is_causal)
        result = locate(tree, site.override_return).node
        assert isinstance(function.node, cst.FunctionDef) and isinstance(result, cst.Return)
        block = function.node.body
        body = list(block.body)
        # By meaning the body is the docstring (if any), the `is_causal`
        # assignment and its `if`, then 0.27.1's statements.
        intro, kept = body[: check.position + 1], body[check.position + 1 :]
        # 0.27.1's docstring takes the place of the intro; comments above the
        # new docstring stay, the intro's other lines go with it.
        docstring = self.statement(OLD_DOCSTRING)
        if opens_with_docstring(intro[0]):
            docstring = docstring.with_changes(leading_lines=intro[0].leading_lines)
        # The override gets its raw value back, in the parentheses the
        # `bool(...)` stood in; comments in it survive.
        assert result.value is not None
        raw = self.expression(OLD_OVERRIDE_RESULT)
        raw = raw.with_changes(lpar=result.value.lpar, rpar=result.value.rpar)
        at = override.position - (check.position + 1)
        kept[at] = override.node.deep_replace(result, result.with_changes(value=raw))
        return function.replaced(
            function.node.with_changes(body=block.with_changes(body=[docstring, *kept]))
        )
