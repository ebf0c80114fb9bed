"""Writes the draft's max_position_embeddings raise and the max_model_len
cap: the RoPE helpers before `SpeculativeConfig`, the helper's parameter and
guard, the DFlash arm after the EAGLE one (whose call gains the argument),
and the methods and the call; backwards, each goes again and the parameter
and argument lists are written as they were. In vLLM 0.26.0's form the
helper and the DFlash arm go in whole, and come out whole."""

from __future__ import annotations

import libcst as cst

from .judge import (
    ARGUMENT_SOURCE,
    ARMS_HUNK,
    DFLASH_ARM,
    DFLASH_ARM_0260,
    DRAFT_POSITIONS,
    GUARD,
    GUARD_HUNK,
    HELPER,
    HELPER_0260,
    LIMIT_CALL_HUNK,
    LIMIT_HUNK,
    MAX_MODEL_LEN_CAP,
    PARAMETER_SOURCE,
    ROPE_CHECK_SOURCE,
    ROPE_HUNK,
    ROPE_TYPES_SOURCE,
    SHARES_HUNK,
    Arms,
    Guarded,
    Helpers,
    Inserted,
)
from ...framework.edit import Hunk, Site
from ...framework.writing.placement import appended, placed_before, removed, without_last
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


def _with_parameters(tree: cst.Module, site: Guarded, change) -> cst.Module:  # type: ignore[no-untyped-def]
    helper = locate(tree, site.function)
    node = helper.node
    assert isinstance(node, cst.FunctionDef)
    params = node.params.with_changes(params=change(node.params))
    return helper.replaced(node.with_changes(params=params))


def _with_call_argument(arm: cst.If, change) -> cst.If:  # type: ignore[no-untyped-def]
    """The arm with its call of the helper's arguments changed."""
    assert isinstance(arm.body, cst.IndentedBlock)
    body = []
    for line in arm.body.body:
        if (
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and isinstance(line.body[0], cst.Expr)
            and isinstance(call := line.body[0].value, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == HELPER
        ):
            line = line.with_changes(body=[line.body[0].with_changes(value=change(call))])
        body.append(line)
    return arm.with_changes(body=arm.body.with_changes(body=body))


class DraftPositions(Writer):
    EDIT = DRAFT_POSITIONS

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is ROPE_HUNK:
            # One statement at a time: atop a module, comments would be its
            # header rather than the constant's.
            new = [self.statement(ROPE_TYPES_SOURCE), self.statement("\n\n" + ROPE_CHECK_SOURCE)]
            return anchor.replaced(*placed_before(anchor.statement, new, blank_lines=2))
        if isinstance(site, Inserted):
            assert hunk in (GUARD_HUNK, ARMS_HUNK)
            new = self.member(HELPER_0260) if hunk is GUARD_HUNK else self.statement(DFLASH_ARM_0260)
            return anchor.replaced(*placed_before(anchor.statement, [new]))
        if hunk is GUARD_HUNK:
            assert isinstance(site, Guarded)
            tree = anchor.replaced(anchor.statement, self.statement(GUARD))
            parameter = cst.parse_statement(f"def f({PARAMETER_SOURCE}): pass")
            assert isinstance(parameter, cst.FunctionDef)
            (new,) = parameter.params.params
            return _with_parameters(
                tree,
                site,
                lambda params: appended(params.params, new, _opening(tree, site)),
            )
        if hunk is ARMS_HUNK:
            argument = self.expression(f"f({ARGUMENT_SOURCE})")
            assert isinstance(argument, cst.Call)
            (new_argument,) = argument.args
            arm = anchor.node
            assert isinstance(arm, cst.If)
            with_argument = _with_call_argument(
                arm,
                lambda call: call.with_changes(
                    args=appended(call.args, new_argument, call.whitespace_before_args)
                ),
            )
            return anchor.replaced(with_argument, self.statement(DFLASH_ARM))
        assert hunk is SHARES_HUNK
        return anchor.replaced(*placed_before(anchor.statement, [self.member(hunk.after)]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is ROPE_HUNK:
            assert isinstance(site, Helpers) and site.function is not None
            doomed = [found.statement, locate(tree, site.function).statement]
            return tree.with_changes(body=removed(tree.body, doomed))
        if hunk is SHARES_HUNK or isinstance(site, Inserted):
            # A whole statement of the backport's: it goes, blank lines handed back.
            return found.with_siblings(removed(found.siblings, [found.statement]))
        if hunk is GUARD_HUNK:
            assert isinstance(site, Guarded)
            tree = found.replaced()
            return _with_parameters(tree, site, lambda params: without_last(params.params))
        assert hunk is ARMS_HUNK and isinstance(site, Arms) and site.dflash is not None
        # The judge found the DFlash arm right after the EAGLE one.
        assert locate(tree, site.dflash).position == found.position + 1
        arm = found.node
        assert isinstance(arm, cst.If)
        without = _with_call_argument(
            arm, lambda call: call.with_changes(args=without_last(call.args))
        )
        siblings = found.siblings
        siblings[found.position : found.position + 2] = [without]
        return found.with_siblings(siblings)


def _opening(tree: cst.Module, site: Guarded) -> cst.BaseParenthesizableWhitespace:
    node = locate(tree, site.function).node
    assert isinstance(node, cst.FunctionDef)
    return node.whitespace_before_params


class MaxModelLenCap(Writer):
    EDIT = MAX_MODEL_LEN_CAP

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is LIMIT_HUNK:
            return anchor.replaced(*placed_before(anchor.statement, [self.member(hunk.after)]))
        assert hunk is LIMIT_CALL_HUNK
        return anchor.replaced(anchor.statement, self.statement(hunk.after))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is LIMIT_HUNK:
            # The member after the method takes back the blank lines it took.
            return found.with_siblings(removed(found.siblings, [found.statement]))
        assert hunk is LIMIT_CALL_HUNK
        return found.replaced()
