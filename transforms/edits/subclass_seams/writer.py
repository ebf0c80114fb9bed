"""Writes the subclass seams: each class attribute first in its class (after
a docstring), each construction through it; backwards, every binding of the
attribute goes and the construction names 0.27.1's class again."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import SUBCLASS_SEAMS, Attribute, Construction
from ...framework.writing.placement import leading_blank_lines, placed_before
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


class SubclassSeams(Writer):
    EDIT = SUBCLASS_SEAMS

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        if isinstance(site, Construction):
            return self._reroute(tree, site)
        assert isinstance(site, Attribute)
        first = locate(tree, site.path)
        return first.with_siblings(self._with_attribute(first.siblings, site))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        if isinstance(site, Construction):
            return self._reroute(tree, site)
        assert isinstance(site, Attribute)
        bindings = [locate(tree, path).node for path in site.bindings]
        first = locate(tree, site.path)
        return first.with_siblings(_without(first.siblings, bindings))

    def _reroute(self, tree: cst.Module, site: Construction) -> cst.Module:
        """The construction calling `site.callee`, its arguments untouched."""
        located = locate(tree, site.path)
        assignment = located.node
        assert isinstance(assignment, cst.Assign)
        call = assignment.value
        if site.in_list:  # nn.ModuleList([... for ...]): the list's element
            call = call.args[0].value.elt  # type: ignore[attr-defined]
        assert isinstance(call, cst.Call)
        rerouted = call.with_changes(func=self.expression(site.callee))
        return located.with_node(assignment.deep_replace(call, rerouted))

    def _with_attribute(
        self, members: list[cst.BaseStatement], site: Attribute
    ) -> list[cst.BaseStatement]:
        """The class's members with the attribute first (after a docstring)."""
        attribute = self.statement(f"{site.attribute} = {site.value}\n")
        # First in the class, after its docstring: the attribute takes over
        # the blank lines before the member that used to open the class.
        position = 1 if members and _is_docstring(members[0]) else 0
        if position < len(members):
            members[position : position + 1] = placed_before(members[position], [attribute])
        else:
            members.append(attribute)
        return members


def _without(
    body: list[cst.BaseStatement], bindings: Sequence[cst.CSTNode]
) -> list[cst.BaseStatement]:
    """The class's members without the bindings; where the forward put one,
    the member after it gets its blank lines back."""
    doomed = {id(binding) for binding in bindings}
    docstring = 1 if body and _is_docstring(body[0]) else 0
    members: list[cst.BaseStatement] = []
    # Where the removed line stood (first in the class or not) and the blank
    # lines above it, for the member that follows it.
    gap: tuple[bool, list[cst.EmptyLine]] | None = None
    for member in body:
        if isinstance(member, cst.SimpleStatementLine):
            kept = [small for small in member.body if id(small) not in doomed]
            if not kept:
                # Comments above the attribute go with it.
                if gap is None:
                    blank, _ = leading_blank_lines(member.leading_lines)
                    gap = (len(members) == docstring, blank)
                continue
            if len(kept) < len(member.body):
                last = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                member = member.with_changes(body=[*kept[:-1], last])
        if gap is not None:
            member = _separated(member, *gap)
            gap = None
        members.append(member)
    return members


def _separated(
    member: cst.BaseStatement, first: bool, removed: list[cst.EmptyLine]
) -> cst.BaseStatement:
    """The member that followed a removed line, separated from what precedes.

    Where the edit inserts (first in the class, after any docstring), it takes
    the removed line's blank lines, as `placed_before` gave them away; anywhere
    else it keeps the wider of the two separations.
    """
    blank, rest = leading_blank_lines(member.leading_lines)
    if first or len(removed) > len(blank):
        blank = removed
    return member.with_changes(leading_lines=[*blank, *rest])
