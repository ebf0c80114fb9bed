"""On the drift suite's trees, `check` (verdicts only, Python's parser) and
`apply` (verdicts, then the libcst writers and the check of what they
wrote) give the same verdicts: one judge serves every command. A cosmetic
variant is pending in every hunk; a semantic one drifts in the edit it
changed, and nothing else is written for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash2_backport.judge import judge
from dflash2_backport.verdicts import Direction, State
from tests.integration import variants
from tests.integration.test_drift_suite import COSMETIC_CASES
from tests.trees import make_site

pytestmark = pytest.mark.wheels


def _checked_and_applied(site: Path) -> tuple[list, list]:
    checked = judge(site, False, Direction.APPLY, use_cache=False)
    applied = judge(site, True, Direction.APPLY, use_cache=False)
    return checked, applied


@pytest.mark.parametrize("name", COSMETIC_CASES)
def test_a_cosmetic_variant_is_pending_alike_for_check_and_apply(
    name: str, tmp_path: Path
) -> None:
    pristine = make_site("0.27.1", tmp_path / "pristine")
    site = make_site("0.27.1", tmp_path / "variant")
    for edit in variants.cosmetic(pristine)[name]:
        edit.apply(site, True)

    checked, applied = _checked_and_applied(site)
    states = {h.state for f in checked for e in f.edits for h in e.hunks}
    assert states == {State.PENDING}
    assert [f.edits for f in checked] == [f.edits for f in applied]
    assert all(f.patched is not None and f.patched != f.original for f in applied)


@pytest.mark.parametrize("name", list(variants.SEMANTIC))
def test_a_semantic_variant_drifts_alike_for_check_and_apply(name: str, tmp_path: Path) -> None:
    edit_name, edits = variants.SEMANTIC[name]
    site = make_site("0.27.1", tmp_path / "variant")
    for edit in edits:
        edit.apply(site, True)

    checked, applied = _checked_and_applied(site)
    assert [f.edits for f in checked] == [f.edits for f in applied]
    drifted = {e.edit for f in checked for e in f.edits if e.state is State.DRIFT}
    assert edit_name in drifted
    assert all(f.patched is None for f in applied)
