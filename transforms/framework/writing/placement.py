"""New statements placed so that they fit the file, and taken out again as
they came in: blank lines and comments go where a person would put them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst

Statement = TypeVar("Statement", bound=cst.BaseStatement)
Item = TypeVar("Item", cst.Arg, cst.Param)

BLANK_LINE = cst.EmptyLine(indent=False)


def leading_blank_lines(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Split a statement's leading lines into the blank run and the rest.

    The blank run separates the statement from what precedes it; the rest
    (comments) belongs to the statement itself.
    """
    blank = 0
    while blank < len(lines) and lines[blank].comment is None:
        blank += 1
    return list(lines[:blank]), list(lines[blank:])


def with_blank_lines(statement: Statement, at_least: int) -> Statement:
    """The statement apart from what precedes it by at least that many blank lines."""
    blank, rest = leading_blank_lines(statement.leading_lines)
    if len(blank) >= at_least:
        return statement
    return statement.with_changes(leading_lines=[*[BLANK_LINE] * at_least, *rest])


def placed_before(
    anchor: Statement, new: Sequence[cst.BaseStatement], blank_lines: int = 1
) -> list[cst.BaseStatement]:
    """`new` then `anchor`, for the place where `anchor` stood.

    The new code takes the blank lines that separated the anchor from what
    preceded it, above its own comments; comments above the anchor stay with
    the anchor, which is kept at least `blank_lines` apart from the new code
    (2 between top-level definitions, as PEP 8 wants).
    """
    blank, rest = leading_blank_lines(anchor.leading_lines)
    first, *others = new
    separated = anchor.with_changes(
        leading_lines=[*[BLANK_LINE] * max(len(blank), blank_lines), *rest]
    )
    # The new code's own comments stay above it.
    own = leading_blank_lines(first.leading_lines)[1]
    return [first.with_changes(leading_lines=[*blank, *own]), *others, separated]


def is_one_of(node: cst.CSTNode, nodes: Sequence[cst.CSTNode]) -> bool:
    return any(node is n for n in nodes)


def removed(
    statements: Sequence[Statement], doomed: Sequence[cst.CSTNode], *, widest: bool = False
) -> list[Statement]:
    """The statements less `doomed` (by identity), as before `placed_before`.

    The statement after each removed run takes back the blank lines that
    separated the run from what preceded it, and keeps its own comments;
    comments written right above a removed statement go with it. `widest`:
    it keeps its own blank lines where they are more (the run was inserted
    after a statement, and its follower kept what it had).
    """
    kept: list[Statement] = []
    handed_back: list[cst.EmptyLine] | None = None
    for statement in statements:
        if is_one_of(statement, doomed):
            if handed_back is None:
                handed_back = leading_blank_lines(statement.leading_lines)[0]
            continue
        if handed_back is not None:
            blank, own = leading_blank_lines(statement.leading_lines)
            if widest and len(blank) > len(handed_back):
                handed_back = blank
            statement = statement.with_changes(leading_lines=[*handed_back, *own])
            handed_back = None
        kept.append(statement)
    return kept


def appended(
    items: Sequence[Item], new: Item, opening: cst.BaseParenthesizableWhitespace
) -> list[Item]:
    """Arguments or parameters with `new` last, written as the list is: on a
    line of its own where they stand one a line (`opening`: the whitespace
    after the bracket), with the trailing comma the list has or lacks.

    The new item takes the last one's comma, and the last one the comma
    that separates the others, so `without_last` gives back the list byte
    for byte.
    """
    *rest, last = items
    if rest and isinstance(rest[-1].comma, cst.Comma):
        separator = rest[-1].comma
    elif isinstance(opening, cst.ParenthesizedWhitespace):
        separator = cst.Comma(whitespace_after=opening)
    else:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [*rest, last.with_changes(comma=separator), new.with_changes(comma=last.comma)]


def without_last(items: Sequence[Item]) -> list[Item]:
    """The list less its last item, as before `appended`."""
    *rest, last, doomed = items
    return [*rest, last.with_changes(comma=doomed.comma)]
