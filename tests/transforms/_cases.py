"""The checks every writer's tests make, given the writer and a source text.

Sources are written as CodemodTest fixtures: indented freely, dedented before
use, and compared with whitespace-only lines blanked. A writer run as a
codemod judges the fixture with its edit's judge, refuses on drift, rewrites,
and judges its own output as the engine does, so every case here holds the
judge and the writer to each other.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms.framework.source import Source
from dflash2_backport.transforms.framework.vocabulary import Direction, State
from dflash2_backport.transforms.framework.writing import EditRefused, Writer

Transform = type[Writer]


def swap(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced once; fails loudly if `old` is not there."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def swapped(text: str, *changes: tuple[str, str]) -> str:
    """`text` with each (old, new) change made in turn, as `swap` makes one."""
    for old, new in changes:
        text = swap(text, old, new)
    return text


def case(transform: Transform) -> CodemodTest:
    return type("Case", (CodemodTest,), {"TRANSFORM": transform})()


def assert_patched(transform: Transform, before: str, after: str) -> None:
    """`before` becomes `after`, which the codemod then leaves alone; reverting
    `after` gives back `before` exactly, and leaves `before` alone."""
    checks = case(transform)
    checks.assertCodemod(before, after)
    checks.assertCodemod(after, after)
    checks.assertCodemod(after, before, direction=Direction.REVERT)
    checks.assertCodemod(before, before, direction=Direction.REVERT)


def assert_left_alone(transform: Transform, source: str) -> None:
    case(transform).assertCodemod(source, source)


def assert_reverted(transform: Transform, applied: str, reverted: str) -> None:
    """Reverting `applied` gives `reverted`, which reverting then leaves alone
    and which the codemod judges pending throughout, as it judges 0.27.1."""
    checks = case(transform)
    checks.assertCodemod(applied, reverted, direction=Direction.REVERT)
    checks.assertCodemod(reverted, reverted, direction=Direction.REVERT)
    assert set(verdicts(transform, reverted).values()) == {State.PENDING}


def assert_applied_and_reverted_exactly(transform: Transform, source: str, back: str) -> None:
    """`source`, the edit written some other way, is every hunk applied: the
    codemod leaves it alone, and reverting it writes `back` byte for byte."""
    assert_left_alone(transform, source)
    assert set(verdicts(transform, source).values()) == {State.APPLIED}
    assert_reverted_exactly(transform, source, back)


def assert_reverted_exactly(transform: Transform, applied: str, expected: str) -> None:
    """Reverting `applied` writes `expected` byte for byte, and reverting
    that changes nothing."""
    exact = CodemodTest.make_fixture_data(expected)
    assert reverted(transform, applied) == exact
    assert reverted(transform, expected) == exact


def refusal(transform: Transform, source: str) -> EditRefused:
    """The refusal the codemod raises on `source` (the test fails without one)."""
    with pytest.raises(EditRefused) as refused:
        case(transform).assertCodemod(source, source)
    return refused.value


def revert_refusal(transform: Transform, source: str) -> EditRefused:
    """The refusal reverting `source` raises (the test fails without one)."""
    with pytest.raises(EditRefused) as refused:
        reverted(transform, source)
    return refused.value


def output(transform: Transform, source: str, revert: bool = False) -> str:
    """The exact text the codemod writes for `source`, taken byte for byte."""
    codemod = transform(direction=Direction.REVERT if revert else Direction.APPLY)
    return codemod.transform_module(cst.parse_module(source)).code


def reverted(transform: Transform, source: str) -> str:
    """The exact text reverting a fixture writes; raises the refusal if any."""
    return output(transform, CodemodTest.make_fixture_data(source), revert=True)


def crlf(source: str) -> str:
    """A fixture as a file with Windows line endings."""
    return CodemodTest.make_fixture_data(source).replace("\n", "\r\n")


def verdicts(transform: Transform, source: str, revert: bool = False) -> dict[str, State]:
    """Each hunk's state on `source`, whether or not the edit is refused."""
    direction = Direction.REVERT if revert else Direction.APPLY
    judged = transform.EDIT.judged(Source(CodemodTest.make_fixture_data(source)), direction)
    return {hunk: found.state for hunk, found in judged.items()}
