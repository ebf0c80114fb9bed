"""The module installer: what it installs, and what it refuses to overwrite."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from dflash2_backport.vllm_tree.installer import (
    MARKER,
    SHIPPED,
    SHIPPED_BEFORE,
    ShippedModule,
    shipped_source,
)
from tests.trees import INSTALLED, make_site, snapshot
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

runner = CliRunner()
MODEL, PACKAGE, SPECULATOR = INSTALLED
REPOSITORY = Path(__file__).resolve().parents[2]


def apply(site: Path):
    return runner.invoke(app, ["apply", "--site-packages", str(site)])


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


@pytest.fixture(scope="module")
def applied_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """0.27.1 after `apply`, and the verdict cache that apply left."""
    base = tmp_path_factory.mktemp("applied")
    site = make_site("0.27.1", base / "site")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH2_BACKPORT_VERDICT_CACHE", str(base / "verdicts"))
        result = apply(site)
    assert result.exit_code == 0, result.output
    return site, base / "verdicts"


@pytest.fixture
def applied(applied_once: tuple[Path, Path], tmp_path: Path) -> Path:
    """A site as `apply` leaves it, its verdicts in this test's cache: the
    same tree and cache as applying here, which every test that starts from
    an applied tree would otherwise repeat."""
    reference, verdicts = applied_once
    site = tmp_path / "site"
    shutil.copytree(reference, site, symlinks=True)
    shutil.copytree(verdicts, os.environ["DFLASH2_BACKPORT_VERDICT_CACHE"], dirs_exist_ok=True)
    return site


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


# A user's change to an installed module, made after `apply`.
CHANGED_AFTER_APPLY = {
    "a line added under the marker": (MARKER + b"\n", MARKER + b"\n# local tweak\n"),
    "a value in the body changed": (b"def ", b"def  "),
    "a line appended": (None, b"\n# mine\n"),
}


def _change(path: Path, old: bytes | None, new: bytes) -> None:
    data = path.read_bytes()
    path.write_bytes(data + new if old is None else data.replace(old, new, 1))


@pytest.mark.parametrize("command", [
    ["check"], ["check", "--diff"], ["apply"], ["apply", "--fail-if-changed"], ["apply", "--diff"],
], ids=" ".join)
@pytest.mark.parametrize("change", CHANGED_AFTER_APPLY.values(), ids=CHANGED_AFTER_APPLY.keys())
def test_an_installed_module_changed_after_apply_is_drift_named_and_never_overwritten(
    applied: Path, command: list[str], change: tuple
) -> None:
    site = applied
    _change(site / MODEL, *change)
    before = snapshot(site)
    result = runner.invoke(app, [*command, "--site-packages", str(site)])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if MODEL in x]
    assert line.split()[0] == "drift", line
    assert "changed since" in line and "dflash2-backport: keep" in line, line
    assert "+++ b/" not in result.output
    assert snapshot(site) == before


def _history(source: str) -> dict[str, bytes]:
    """Every version of modules/SOURCE this repository has committed, by commit."""
    path = f"modules/{source}"
    commits = subprocess.run(
        ["git", "-C", str(REPOSITORY), "log", "--format=%H", "--", path],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    assert commits, f"no history of {path}: this test needs the repository's git history"
    return {
        commit: subprocess.run(
            ["git", "-C", str(REPOSITORY), "show", f"{commit}:{path}"],
            check=True, capture_output=True,
        ).stdout
        for commit in commits
    }


@pytest.mark.parametrize("module", SHIPPED, ids=lambda m: m.source)
def test_every_earlier_version_of_a_module_in_the_history_is_known_as_ours(
    module: ShippedModule,
) -> None:
    earlier = {
        hashlib.sha256(data).hexdigest()
        for data in _history(module.source).values()
        if data != shipped_source(module)
    }
    assert earlier <= SHIPPED_BEFORE[module.source], (
        "add these digests to installer.SHIPPED_BEFORE: "
        f"{sorted(earlier - SHIPPED_BEFORE[module.source])}"
    )


def _earlier_versions() -> list[tuple[ShippedModule, bytes]]:
    return [
        (module, data)
        for module in SHIPPED
        for data in {d: None for d in _history(module.source).values()}
        if data != shipped_source(module)
    ]


@pytest.mark.parametrize(("module", "older"), _earlier_versions())
def test_an_older_copy_of_ours_is_replaced_by_apply_and_removed_by_revert(
    applied: Path, module: ShippedModule, older: bytes
) -> None:
    site = applied
    path = site / module.dest
    path.write_bytes(older)
    result = runner.invoke(app, ["check", "--site-packages", str(site)])
    assert result.exit_code == 1, result.output
    assert f"pending   new file             {module.dest}" in result.output
    assert apply(site).exit_code == 0
    assert path.read_bytes() == shipped_source(module)
    path.write_bytes(older)
    result = runner.invoke(app, ["revert", "--site-packages", str(site)])
    assert result.exit_code == 0, result.output
    assert not path.exists()


# Where a tree keeps its own version of a module: the file, and what
# each command says of it.
def _keep(data: bytes) -> bytes:
    first, rest = data.split(b"\n", 1)
    return first + b"\n# dflash2-backport: keep\n" + rest


@pytest.mark.parametrize("how", ["changed after apply", "written by the fork"])
def test_a_module_that_says_keep_is_left_as_it_is_by_every_command(
    site: Path, how: str
) -> None:
    if how == "changed after apply":
        assert apply(site).exit_code == 0
        own = _keep(shipped_source(SHIPPED[0])) + b"\n# the fork's tweak\n"
    else:
        own = b"# SPDX-License-Identifier: Apache-2.0\n# dflash2-backport: keep\nX = 1\n"
    (site / MODEL).parent.mkdir(parents=True, exist_ok=True)
    (site / MODEL).write_bytes(own)
    assert apply(site).exit_code == 0
    before = snapshot(site)
    check = runner.invoke(app, ["check", "--site-packages", str(site)])
    assert check.exit_code == 0, check.output
    (line,) = [x for x in check.output.splitlines() if MODEL in x]
    assert line.split()[0] == "kept" and "dflash2-backport: keep" in line, line
    assert check.output.splitlines()[-1].startswith("nothing to do")
    document = json.loads(
        runner.invoke(app, ["check", "--site-packages", str(site), "--json"]).output
    )
    assert {m["file"]: m["kept"] for m in document["modules"]}[MODEL] is True
    assert apply(site).exit_code == 0
    assert snapshot(site) == before
    reverted = runner.invoke(app, ["revert", "--site-packages", str(site)])
    assert reverted.exit_code == 0, reverted.output
    assert (site / MODEL).read_bytes() == own
    assert not (site / SPECULATOR).exists()


# (the keep line's line number, the file's line ending, whether it is
# honoured): the messages tell users to put it among the first five lines.
KEEP_LINE_PLACES = [
    (1, b"\n", True),
    (5, b"\n", True),
    (5, b"\r\n", True),
    (6, b"\n", False),
    (6, b"\r\n", False),
    (9, b"\n", False),
]


@pytest.mark.parametrize("line, ending, kept", KEEP_LINE_PLACES)
def test_the_keep_line_counts_in_a_modules_first_five_lines_and_no_later(
    site: Path, line: int, ending: bytes, kept: bool
) -> None:
    lines = [f"# the fork's line {n}".encode() for n in range(1, line)]
    own = ending.join([*lines, b"# dflash2-backport: keep", b"X = 1", b""])
    (site / MODEL).parent.mkdir(parents=True, exist_ok=True)
    (site / MODEL).write_bytes(own)
    document = json.loads(
        runner.invoke(app, ["check", "--site-packages", str(site), "--json"]).output
    )
    assert {m["file"]: m["kept"] for m in document["modules"]}[MODEL] is kept
    if not kept:
        result = runner.invoke(app, ["apply", "--site-packages", str(site)])
        assert result.exit_code == 2, result.output
        assert "to its first 5 lines" in result.output, result.output
        assert (site / MODEL).read_bytes() == own


def test_upstreams_modules_with_a_keep_line_are_not_taken_for_upstream_shipping_dflash2(
    site: Path,
) -> None:
    for relative in (MODEL, SPECULATOR):
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(_keep(_upstream("0.28.0", relative)))
    result = runner.invoke(app, ["check", "--site-packages", str(site)])
    assert result.exit_code == 1, result.output
    assert "ships DFlash2" not in result.output
    kept = [x for x in result.output.splitlines() if x.split()[0] == "kept"]
    assert len(kept) == 2, result.output
