"""Reformatted, commented and reordered 0.27.1 trees are patched to the spec's
meaning (`apply --only-pr`) and then to the meaning `apply` gives 0.27.1 as
it ships (the PR's edits and the upstream fixes); trees whose meaning
changed are refused with every file untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from tests.integration import variants
from tests.oracle import seed_patched
from tests.trees import TARGETS, make_site, snapshot

pytestmark = [pytest.mark.wheels, pytest.mark.variants]

runner = CliRunner()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A pristine 0.27.1 site and the spec patcher's result on it."""
    scratch = tmp_path_factory.mktemp("reference")
    pristine = make_site("0.27.1", scratch / "pristine")
    return pristine, seed_patched(pristine, scratch)


def _variant(site: Path, edits: list, strict: bool) -> None:
    for edit in edits:
        edit.apply(site, strict)
    assert snapshot(site), "variant produced an empty tree"


COSMETIC_CASES = [
    "ruff format, line length 79",
    "ruff format, line length 120",
    "single quotes everywhere",
    "isort, one import a line",
    "a comment inside every target",
    "extra blank lines",
    "reordered class members",
    "trailing commas",
    "reworded docstrings",
    "extra registry entries",
    "a comment that mentions DFlash2DraftModel",
    "the fixes' anchors commented and rewrapped",
]


@pytest.fixture(scope="module")
def every_edit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.27.1 as it ships with every edit applied: what a cosmetic variant
    must mean once patched, carried through the same cosmetic change (the
    tables hold each fix's code to what it must be; this holds the judges to
    finding and writing it whatever the formatting)."""
    site = make_site("0.27.1", tmp_path_factory.mktemp("every-edit") / "site")
    result = runner.invoke(app, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 0, result.output
    return site


@pytest.mark.parametrize("name", COSMETIC_CASES)
def test_cosmetic_variant_is_patched_to_the_spec_meaning(
    name: str, reference: tuple[Path, Path], every_edit: Path, tmp_path: Path
) -> None:
    pristine, seeded = reference
    edits = variants.cosmetic(pristine)[name]
    site = make_site("0.27.1", tmp_path / "variant")
    _variant(site, edits, strict=True)
    before = snapshot(site)
    assert before != snapshot(pristine)

    for only_pr, patched in ((True, seeded), (False, every_edit)):
        result = runner.invoke(
            app, ["apply", *(["--only-pr"] if only_pr else []), "--site-packages", str(site)]
        )
        assert result.exit_code == 0, result.output
        # The set's result on 0.27.1, carried through the same cosmetic change.
        expected = make_site("0.27.1", tmp_path / f"expected-{only_pr}")
        for relative in TARGETS:
            (expected / relative).write_bytes((patched / relative).read_bytes())
        _variant(expected, edits, strict=False)
        for relative in TARGETS:
            assert variants.canonical((site / relative).read_text()) == variants.canonical(
                (expected / relative).read_text()
            ), (only_pr, relative)

    again = runner.invoke(app, ["check", "--site-packages", str(site)])
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("name", ["isort, one import a line", "ruff format, line length 79"])
def test_a_tree_formatted_after_apply_is_reverted_to_its_formatted_original(
    name: str, reference: tuple[Path, Path], every_edit: Path, tmp_path: Path
) -> None:
    """A fork's pre-commit formats what `apply` wrote; `revert` still takes
    all of it back, the imports the fixes added included."""
    pristine, _ = reference
    edits = variants.cosmetic(pristine)[name]
    site = tmp_path / "site"
    shutil.copytree(every_edit, site, symlinks=True)
    _variant(site, edits, strict=False)
    expected = make_site("0.27.1", tmp_path / "expected")
    _variant(expected, edits, strict=False)

    result = runner.invoke(app, ["revert", "--site-packages", str(site)])

    assert result.exit_code == 0, result.output
    for relative in TARGETS:
        assert variants.canonical((site / relative).read_text()) == variants.canonical(
            (expected / relative).read_text()
        ), relative


@pytest.mark.parametrize("name", list(variants.SEMANTIC))
def test_semantic_variant_is_refused_and_nothing_is_written(name: str, tmp_path: Path) -> None:
    edit, edits = variants.SEMANTIC[name]
    site = make_site("0.27.1", tmp_path / "variant")
    _variant(site, edits, strict=True)
    before = snapshot(site)

    result = runner.invoke(app, ["apply", "--site-packages", str(site)])

    assert result.exit_code == 2, result.output
    assert snapshot(site) == before
    drifted = [line for line in result.output.splitlines() if line.lstrip().startswith("drift")]
    assert any(f" {edit} " in line for line in drifted), result.output
    assert "Traceback" not in result.output
