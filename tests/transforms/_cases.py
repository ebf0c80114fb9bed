"""The checks every codemod's tests make, given the codemod and a source text.

Sources are written as CodemodTest fixtures: indented freely, dedented before
use, and compared with whitespace-only lines blanked.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms._base import BackportCodemod, EditRefused, State

Transform = type[BackportCodemod]


def swap(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced once; fails loudly if `old` is not there."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def swapped(text: str, *changes: tuple[str, str]) -> str:
    """`text` with each (old, new) change made in turn, as `swap` makes one."""
    for old, new in changes:
        text = swap(text, old, new)
    return text


def _case(transform: Transform) -> CodemodTest:
    return type("Case", (CodemodTest,), {"TRANSFORM": transform})()


def assert_patched(transform: Transform, before: str, after: str) -> None:
    """`before` becomes `after`, which the codemod then leaves alone; reverting
    `after` gives back `before` exactly, and leaves `before` alone."""
    case = _case(transform)
    case.assertCodemod(before, after)
    case.assertCodemod(after, after)
    case.assertCodemod(after, before, revert=True)
    case.assertCodemod(before, before, revert=True)


def assert_left_alone(transform: Transform, source: str) -> None:
    _case(transform).assertCodemod(source, source)


def refusal(transform: Transform, source: str) -> EditRefused:
    """The refusal the codemod raises on `source` (the test fails without one)."""
    with pytest.raises(EditRefused) as refused:
        _case(transform).assertCodemod(source, source)
    return refused.value


def output(transform: Transform, source: str) -> str:
    """The exact text the codemod writes for `source`, taken byte for byte."""
    return transform().transform_module(cst.parse_module(source)).code


def verdicts(transform: Transform, source: str) -> dict[str, State]:
    """Each hunk's state on `source`, whether or not the edit is refused."""
    codemod = transform()
    try:
        codemod.transform_module(
            cst.parse_module(CodemodTest.make_fixture_data(source))
        )
    except EditRefused:
        pass
    return {v.hunk: v.state for v in codemod.verdicts}
