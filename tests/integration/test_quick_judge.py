"""`check` judges with Python's parser alone; on the drift suite's trees its
verdicts are the codemods' verdicts, and it is sure of every hunk wherever
the meaning is 0.27.1's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash2_backport.judge import judge
from dflash2_backport.transforms import _quick
from dflash2_backport.verdicts import Direction, State
from tests.integration import variants
from tests.integration.test_drift_suite import COSMETIC_CASES
from tests.trees import TARGETS, make_site

pytestmark = pytest.mark.wheels


def _quick_verdicts(site: Path) -> list[State | None]:
    return [
        state
        for path in TARGETS
        for verdicts in _quick.judge_file(path, (site / path).read_bytes()).values()
        for state in verdicts.values()
    ]


def _both_judges(site: Path) -> tuple[list, list]:
    """Edit reports as `check` makes them (no bytes wanted) and as `apply`
    does (every file through the codemods, held to the quick verdicts)."""
    checked = judge(site, False, Direction.APPLY, use_cache=False)
    applied = judge(site, True, Direction.APPLY, use_cache=False)
    return [f.edits for f in checked], [f.edits for f in applied]


@pytest.mark.parametrize("name", COSMETIC_CASES)
def test_check_is_sure_of_a_cosmetic_variant_and_agrees_with_the_codemods(
    name: str, tmp_path: Path
) -> None:
    pristine = make_site("0.27.1", tmp_path / "pristine")
    site = make_site("0.27.1", tmp_path / "variant")
    for edit in variants.cosmetic(pristine)[name]:
        edit.apply(site, True)

    assert set(_quick_verdicts(site)) == {State.PENDING}
    checked, applied = _both_judges(site)
    assert checked == applied


@pytest.mark.parametrize("name", list(variants.SEMANTIC))
def test_check_leaves_a_semantic_variant_to_the_codemods(
    name: str, tmp_path: Path
) -> None:
    edit_name, edits = variants.SEMANTIC[name]
    site = make_site("0.27.1", tmp_path / "variant")
    for edit in edits:
        edit.apply(site, True)

    assert State.DRIFT not in _quick_verdicts(site)
    checked, applied = _both_judges(site)
    assert checked == applied
    drifted = {e.edit for edits in checked for e in edits if e.state is State.DRIFT}
    assert edit_name in drifted
