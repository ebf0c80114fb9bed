"""The tool on real vLLM trees from the PyPI wheels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash2_backport.transforms import EDITS
from tests.integration import run
from tests.oracle import closure_patched, seed_patched
from tests.trees import INSTALLED, TARGETS, make_site, snapshot

pytestmark = pytest.mark.wheels


@pytest.fixture
def pristine(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_apply_only_pr_on_pristine_0_27_1_equals_the_spec_patcher_byte_for_byte(
    pristine: Path, tmp_path: Path
) -> None:
    expected = seed_patched(pristine, tmp_path)
    code, output = run("apply", "--only-pr", "--site-packages", str(pristine))
    assert code == 0, output
    for relative in TARGETS:
        assert (pristine / relative).read_bytes() == (expected / relative).read_bytes(), relative
    for relative in INSTALLED:
        assert (pristine / relative).is_file(), relative


def test_apply_on_pristine_0_27_1_equals_the_spec_patcher_and_the_fixes_byte_for_byte(
    pristine: Path, tmp_path: Path
) -> None:
    # The fixes made at once with the spec's edits, or on the spec
    # patcher's result, write the same bytes.
    expected = closure_patched(pristine, tmp_path)
    code, output = run("apply", "--site-packages", str(pristine))
    assert code == 0, output
    for relative in TARGETS:
        assert (pristine / relative).read_bytes() == (expected / relative).read_bytes(), relative
    for relative in INSTALLED:
        assert (pristine / relative).is_file(), relative


def test_check_exit_codes_before_and_after_apply(pristine: Path) -> None:
    assert run("check", "--site-packages", str(pristine))[0] == 1
    assert run("apply", "--site-packages", str(pristine))[0] == 0
    code, output = run("check", "--site-packages", str(pristine))
    assert code == 0, output
    assert "nothing to do" in output


def test_check_never_writes(pristine: Path) -> None:
    before = snapshot(pristine)
    run("check", "--site-packages", str(pristine), "--diff")
    assert snapshot(pristine) == before


def test_second_apply_changes_no_byte(pristine: Path) -> None:
    run("apply", "--site-packages", str(pristine))
    once = snapshot(pristine)
    code, output = run("apply", "--site-packages", str(pristine))
    assert code == 0
    assert "nothing to do" in output
    assert snapshot(pristine) == once


@pytest.mark.parametrize("flag", ["--diff", "--diff-modules"])
def test_check_diff_names_every_file_apply_writes(pristine: Path, flag: str) -> None:
    code, output = run("check", "--site-packages", str(pristine), "--json", flag)
    assert code == 1
    diff = json.loads(output)["diff"]
    changed = {
        line[len("+++ b/"):].strip() for line in diff.splitlines() if line.startswith("+++ b/")
    }
    assert changed == set(TARGETS) | set(INSTALLED) | {"vllm-0.27.1.dist-info/RECORD"}


def test_json_reports_every_edit_state_file_and_version(pristine: Path) -> None:
    code, output = run("check", "--site-packages", str(pristine), "--json")
    document = json.loads(output)
    assert code == 1
    assert document["vllm_version"] == "0.27.1"
    assert document["action"] == "pending"
    ours = [e for e in document["edits"] if e["set"] == "pr"]
    assert {e["edit"] for e in ours} == {
        "causality", "subclass-seams", "registry", "vocab-parallel-topk",
        "gumbel", "speculator-selection", "draft-logit-cache",
    }
    # The spec's fifteen hunks; the fixes' are listed beside them.
    assert sum(len(e["hunks"]) for e in ours) == 15
    fixes = [e for e in document["edits"] if e["set"] == "fix"]
    assert {e["edit"] for e in fixes} == {e.name for e in EDITS if e.fix is not None}
    assert all(e["upstream_release"] for e in fixes), fixes
    assert {e["state"] for e in document["edits"]} == {"pending"}
    assert {e["file"] for e in document["edits"]} == set(TARGETS)


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0", "0.33.0"])
def test_releases_that_ship_dflash2_are_left_alone(version: str, tmp_path: Path) -> None:
    site = make_site(version, tmp_path / "site")
    before = snapshot(site)
    for command in ("check", "apply"):
        code, output = run(command, "--site-packages", str(site))
        assert code == 0, output
        assert "ships DFlash2" in output
    assert snapshot(site) == before
