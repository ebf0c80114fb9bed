"""Writes the registry entry right after the DFlash1 one, quoted and laid out
as that entry is; backwards, the entry goes and the one before it takes over
its ending."""

from __future__ import annotations

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import ENTRY_KEY, ENTRY_VALUE, REGISTRY, Entry
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import Located, locate


def _table(located: Located) -> cst.Dict:
    assignment = located.node
    assert isinstance(assignment, cst.Assign | cst.AnnAssign)
    assert isinstance(assignment.value, cst.Dict)
    return assignment.value


def _with_elements(located: Located, elements: list[cst.BaseDictElement]) -> cst.Module:
    assignment = located.node
    table = _table(located)
    return located.with_node(
        assignment.with_changes(value=table.with_changes(elements=elements))
    )


class RegistryEntry(Writer):
    EDIT = REGISTRY

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        """The entry right after the anchor, written as the anchor is: same
        quotes, the anchor's line ending handed on (see `_split_comma`)."""
        assert isinstance(site, Entry)
        located = locate(tree, site.path)
        table = _table(located)
        index = site.element
        anchor = table.elements[index]
        assert isinstance(anchor, cst.DictElement)
        elements = list(table.elements)
        anchor_comma, entry_comma = _split_comma(table, index)
        quote = site.quote
        new_entry = anchor.with_changes(
            key=cst.SimpleString(f"{quote}{ENTRY_KEY}{quote}"),
            value=self.expression(ENTRY_VALUE.replace('"', quote)),
            comma=entry_comma,
        )
        elements[index] = anchor.with_changes(comma=anchor_comma)
        elements.insert(index + 1, new_entry)
        return _with_elements(located, elements)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Entry)
        located = locate(tree, site.path)
        return _with_elements(located, _without_entry(_table(located), site.element))


def _without_entry(table: cst.Dict, index: int) -> list[cst.BaseDictElement]:
    """The table's elements less the entry at `index`, separators put back as
    `_split_comma` found them: the entry before it takes over its ending."""
    elements = list(table.elements)
    entry = elements.pop(index)
    if index == 0:
        return elements
    previous = elements[index - 1]
    if index == len(elements):  # the entry closed the table
        elements[index - 1] = previous.with_changes(comma=entry.comma)
        return elements
    before, after = previous.comma, entry.comma
    if isinstance(before, cst.Comma) and isinstance(after, cst.Comma):
        kept, moved = before.whitespace_after, after.whitespace_after
        if isinstance(kept, cst.ParenthesizedWhitespace) and isinstance(
            moved, cst.ParenthesizedWhitespace
        ):
            # Comments and blank lines that stood before the next entry stay.
            empty_lines = (*kept.empty_lines, *moved.empty_lines)
            elements[index - 1] = previous.with_changes(
                comma=before.with_changes(
                    whitespace_after=kept.with_changes(empty_lines=empty_lines)
                )
            )
    return elements


def _split_comma(table: cst.Dict, index: int) -> tuple[cst.Comma, cst.Comma | cst.MaybeSentinel]:
    """Commas for the anchor and for the entry inserted after it.

    The anchor keeps its own line ending (and any comment on it); the new
    entry gets what used to separate the anchor from whatever followed it.
    """
    elements = table.elements
    comma = elements[index].comma
    if index == len(elements) - 1:
        # The anchor closes the table: separate it the way the entry before
        # it is separated from it, and hand its own ending (a trailing comma
        # or none) to the new last entry.
        previous = elements[index - 1].comma if index else None
        if isinstance(previous, cst.Comma):
            return previous, comma
        opening = table.lbrace.whitespace_after
        if isinstance(opening, cst.ParenthesizedWhitespace):
            line_break = opening.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
            return cst.Comma(whitespace_after=line_break), comma
        return cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), comma
    assert isinstance(comma, cst.Comma)
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        anchor_comma = comma.with_changes(whitespace_after=after.with_changes(empty_lines=()))
        entry_comma = comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace())
        )
        return anchor_comma, entry_comma
    return comma, comma
