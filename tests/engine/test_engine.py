"""The engine: the same plan on one core or two, errors from any process, and
the file lists derived from the edits' declarations."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from dflash2_backport import transforms
from dflash2_backport.engine.plan import make_plan
from tests.trees import TARGETS, make_site, snapshot

pytestmark = pytest.mark.wheels


def _drift_in_registry(site: Path) -> None:
    path = site / "vllm/model_executor/models/registry.py"
    path.write_text(path.read_text().replace('"DFlashDraftModel": (', '"DFlashDraftModelX": ('))


@pytest.mark.parametrize("tree", ["pristine", "drifted"])
def test_one_process_and_two_give_the_same_plan(
    tree: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    if tree == "drifted":
        _drift_in_registry(site)
    plans = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("DFLASH2_BACKPORT_JOBS", jobs)
        plan = make_plan(site, need_changes=True, use_cache=False)
        plans[jobs] = (plan.edits, plan.changes)
    assert plans["1"] == plans["2"]
    # Every declaration, file by file in the order of the declarations.
    assert [e.edit for e in plans["2"][0]] == [
        edit.name for path in transforms.target_files() for edit in transforms.edits_in(path)
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_a_target_that_does_not_parse_is_named_whichever_process_reads_it(
    target: str, tmp_path: Path
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    (site / target).write_text("def broken(:\n")
    result = CliRunner().invoke(app, ["check", "--site-packages", str(site)])
    assert result.exit_code == 2
    assert f"{target}: does not parse" in result.output
    assert "Traceback" not in result.output


def test_a_rewrite_that_would_not_parse_is_refused_before_any_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash2_backport.transforms.framework import writing as writers

    site = make_site("0.27.1", tmp_path / "site")
    real = writers.rewrite

    def broken_rewrite(data, *args):  # type: ignore[no-untyped-def]
        patched = real(data, *args)
        return patched + b"def broken(:\n" if b"def init_speculator" in data else patched

    monkeypatch.setattr(writers, "rewrite", broken_rewrite)
    before = snapshot(site)
    result = CliRunner().invoke(app, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 2
    assert "spec_decode/__init__.py: the patched file would not parse" in result.output
    assert snapshot(site) == before


def test_the_commit_order_knows_every_file_the_edits_touch() -> None:
    from dflash2_backport.transforms import EDITS

    from dflash2_backport.vllm_tree.installer import SHIPPED
    from dflash2_backport.vllm_tree.layout import MODULE_FILES, SEAMS, SWITCHES

    assert set(SEAMS + SWITCHES) == {edit.path for edit in EDITS}
    assert not set(SEAMS) & set(SWITCHES)
    assert set(MODULE_FILES) == {module.dest for module in SHIPPED}
