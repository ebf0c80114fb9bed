"""New statements placed so that they fit the file, and taken out again as
they came in: blank lines and comments go where a person would put them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst

Statement = TypeVar("Statement", bound=cst.BaseStatement)

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
    preceded it; comments above the anchor stay with the anchor, which is kept
    at least `blank_lines` apart from the new code (2 between top-level
    definitions, as PEP 8 wants).
    """
    blank, rest = leading_blank_lines(anchor.leading_lines)
    first, *others = new
    separated = anchor.with_changes(
        leading_lines=[*[BLANK_LINE] * max(len(blank), blank_lines), *rest]
    )
    return [first.with_changes(leading_lines=blank), *others, separated]


def is_one_of(node: cst.CSTNode, nodes: Sequence[cst.CSTNode]) -> bool:
    return any(node is n for n in nodes)


def removed(statements: Sequence[Statement], doomed: Sequence[cst.CSTNode]) -> list[Statement]:
    """The statements less `doomed` (by identity), as before `placed_before`.

    The statement after each removed run takes back the blank lines that
    separated the run from what preceded it, and keeps its own comments;
    comments written right above a removed statement go with it.
    """
    kept: list[Statement] = []
    handed_back: list[cst.EmptyLine] | None = None
    for statement in statements:
        if is_one_of(statement, doomed):
            if handed_back is None:
                handed_back = leading_blank_lines(statement.leading_lines)[0]
            continue
        if handed_back is not None:
            _, own = leading_blank_lines(statement.leading_lines)
            statement = statement.with_changes(leading_lines=[*handed_back, *own])
            handed_back = None
        kept.append(statement)
    return kept
