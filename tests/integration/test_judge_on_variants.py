"""On the drift suite's trees, `check` (verdicts only, Python's parser) and
`apply` (verdicts, then the libcst writers and the check of what they
wrote) give the same verdicts: one judge serves every command. A cosmetic
variant is pending in every hunk; a semantic one drifts in the edit it
changed, and nothing else is written for it. Rewriting only the regions
the hunks touch writes what rewriting whole files writes, both ways."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dflash2_backport.transforms.framework.vocabulary import Direction, State
from dflash2_backport.engine.judge import judge
from tests.integration import variants
from tests.integration.test_drift_suite import COSMETIC_CASES
from tests.trees import TARGETS, make_site

pytestmark = [pytest.mark.wheels, pytest.mark.variants]


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


#: Whole-file rewrites by (file, direction, digest of its bytes): the reference
#: the regions are held to. A file a variant leaves as the pristine tree has it
#: is the same input in every case, and its whole rewrite the same output.
_WHOLE: dict[tuple[str, Direction, bytes], bytes] = {}


def _rewrites(site: Path, direction: Direction) -> None:
    """Each file rewritten in its regions and whole: the same bytes."""
    from dflash2_backport.transforms.framework import writing as writers
    from dflash2_backport.transforms.framework.writing.regions import rewrite_regions

    from dflash2_backport import transforms
    from dflash2_backport.utils.safe_files import decode_source

    # `rewrite` given regions falls back to the whole file where a region
    # does not parse as the file does; what the regions alone wrote is kept
    # so that a fallback fails here, and the regions are rewritten once.
    by_regions: list[str | None] = []

    def kept(*arguments):
        by_regions.append(patched := rewrite_regions(*arguments))
        return patched

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writers, "rewrite_regions", kept)
        for path in TARGETS:
            data = (site / path).read_bytes()
            text = decode_source(path, data)
            source = transforms.framework.source.Source(text)
            judged = [
                (edit, edit.pinned(source, hunks))
                for edit, hunks in transforms.judge_file(path, source, direction)
            ]
            regions = writers.plan(source, judged, direction)
            assert regions is not None and regions.regions, path
            by_regions.clear()
            patched = writers.rewrite(data, judged, direction, regions)
            assert len(by_regions) == 1 and by_regions[0] is not None, path
            key = (path, direction, hashlib.sha256(data).digest())
            if key not in _WHOLE:
                _WHOLE[key] = writers.rewrite(data, judged, direction)
            assert patched == _WHOLE[key], path


@pytest.mark.parametrize("name", ["pristine", *COSMETIC_CASES])
def test_rewriting_the_touched_regions_writes_what_rewriting_whole_files_writes(
    name: str, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from dflash2_backport.cli.main import app

    pristine = make_site("0.27.1", tmp_path / "pristine")
    site = make_site("0.27.1", tmp_path / "variant")
    if name != "pristine":
        for edit in variants.cosmetic(pristine)[name]:
            edit.apply(site, True)
    _rewrites(site, Direction.APPLY)
    assert CliRunner().invoke(app, ["apply", "--site-packages", str(site)]).exit_code == 0
    _rewrites(site, Direction.REVERT)
