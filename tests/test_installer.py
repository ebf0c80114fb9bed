"""The module installer: what it installs, and what it refuses to overwrite."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli import app
from dflash2_backport.installer import MARKER, SHIPPED, shipped_source
from tests.trees import INSTALLED, make_site, snapshot
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

runner = CliRunner()
MODEL, PACKAGE, SPECULATOR = INSTALLED
REPOSITORY = Path(__file__).resolve().parent.parent


def apply(site: Path):
    return runner.invoke(app, ["apply", "--site-packages", str(site)])


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_the_shipped_modules_are_installed_as_they_are_shipped(site: Path) -> None:
    assert apply(site).exit_code == 0
    for module in SHIPPED:
        installed = site / module.dest
        assert installed.read_bytes() == shipped_source(module)
        assert installed.stat().st_mode == (site / "vllm/__init__.py").stat().st_mode


def test_shipped_modules_carry_the_marker_and_the_package_its_spdx_header() -> None:
    for module in SHIPPED:
        source = shipped_source(module)
        assert source.startswith(b"# SPDX-License-Identifier: Apache-2.0\n")
        assert (MARKER in source) == (module.dest != PACKAGE)


def _upstream(version: str, relative: str) -> bytes:
    return (vllm_source(version) / relative).read_bytes()


REFUSALS = {
    "only upstream's model module": {MODEL: lambda: _upstream("0.28.0", MODEL)},
    "only upstream's speculator": {SPECULATOR: lambda: _upstream("0.28.0", SPECULATOR)},
    "someone else's model module": {MODEL: lambda: b"# mine\n"},
    "a different dflash2 package file": {PACKAGE: lambda: b"import os\n"},
}


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_module_file_this_tool_did_not_write_is_never_overwritten(
    site: Path, case: dict
) -> None:
    for relative, content in case.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(content())
    before = snapshot(site)
    result = apply(site)
    assert result.exit_code == 2, result.output
    (relative,) = case
    assert any(
        line.lstrip().startswith("drift") and relative in line
        for line in result.output.splitlines()
    ), result.output
    assert snapshot(site) == before


def test_upstream_modules_in_place_mean_upstream_ships_dflash2(site: Path) -> None:
    for relative in INSTALLED:
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(_upstream("0.28.0", relative))
    before = snapshot(site)
    result = apply(site)
    assert result.exit_code == 0
    assert "ships DFlash2" in result.output
    assert snapshot(site) == before


def test_an_older_copy_of_ours_is_replaced(site: Path) -> None:
    assert apply(site).exit_code == 0
    old = site / MODEL
    old.write_bytes(old.read_bytes() + b"\n# an older release\n")
    result = runner.invoke(app, ["check", "--site-packages", str(site)])
    assert result.exit_code == 1
    assert apply(site).exit_code == 0
    assert old.read_bytes() == shipped_source(SHIPPED[0])
