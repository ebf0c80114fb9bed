"""The command line on real 0.27.1 trees: exit codes, output and bad input."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli import app
from tests.trees import INSTALLED, make_site, snapshot

pytestmark = pytest.mark.wheels

runner = CliRunner()
REGISTRY = "vllm/model_executor/models/registry.py"


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_human_output_is_one_line_per_edit_and_module_then_a_summary(site: Path) -> None:
    result = invoke("check", "--site-packages", str(site))
    lines = result.output.splitlines()
    assert lines[0] == f"vLLM 0.27.1 at {site}"
    assert len(lines) == 1 + 8 + 3 + 1 + 1
    assert all(line.split()[0] == "pending" for line in lines[1:-1])
    assert lines[-2].split() == ["pending", "record", "vllm-0.27.1.dist-info/RECORD"]
    assert lines[-1].startswith("pending:")


def test_drift_lines_name_the_edit_file_expectation_and_finding(site: Path) -> None:
    path = site / REGISTRY
    path.write_text(
        path.read_text().replace(
            '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
            '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n'
            '    "DFlash2DraftModel": ("elsewhere", "Other"),\n',
        )
    )
    result = invoke("check", "--site-packages", str(site))
    assert result.exit_code == 2
    (line,) = [x for x in result.output.splitlines() if x.lstrip().startswith("drift")]
    assert "registry" in line and REGISTRY in line
    assert "expected" in line and "found" in line and "elsewhere" in line


def test_every_drifted_edit_is_reported_not_only_the_first(site: Path) -> None:
    for relative, old, new in [
        (REGISTRY, '"DFlashDraftModel": (', '"DFlashDraftModelX": ('),
        ("vllm/v1/worker/gpu/sample/gumbel.py", "def gumbel_block_argmax(", "def other("),
    ]:
        path = site / relative
        path.write_text(path.read_text().replace(old, new))
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site), "--json")
    document = json.loads(result.output)
    assert result.exit_code == 2
    assert document["action"] == "refused"
    assert {e["edit"] for e in document["edits"] if e["state"] == "drift"} == {"registry", "gumbel"}
    assert snapshot(site) == before


def _bad(site: Path, case: str) -> None:
    if case == "no vllm package":
        shutil.rmtree(site / "vllm")
    elif case == "target does not parse":
        (site / REGISTRY).write_text("def broken(:\n")
    elif case == "target missing":
        (site / REGISTRY).unlink()
    elif case == "directory where a module goes":
        (site / INSTALLED[0]).mkdir(parents=True)
    elif case == "file where the dflash2 package goes":
        (site / INSTALLED[1]).parent.parent.mkdir(parents=True, exist_ok=True)
        (site / INSTALLED[1]).parent.write_text("")
    elif case == "not a 0.27 release":
        metadata = next(site.glob("vllm-*.dist-info")) / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 0.27.1", "Version: 0.26.0"))
    elif case == "no dist-info":
        shutil.rmtree(next(site.glob("vllm-*.dist-info")))


BAD_INPUT = [
    "no vllm package",
    "target does not parse",
    "target missing",
    "directory where a module goes",
    "file where the dflash2 package goes",
    "not a 0.27 release",
    "no dist-info",
]


@pytest.mark.parametrize("case", BAD_INPUT)
@pytest.mark.parametrize("command", ["check", "apply"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    site: Path, case: str, command: str
) -> None:
    _bad(site, case)
    before = snapshot(site)
    result = invoke(command, "--site-packages", str(site))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    problem = [
        x for x in result.output.splitlines() if "error" in x or x.lstrip().startswith("drift")
    ]
    assert problem, result.output
    assert snapshot(site) == before


@pytest.mark.parametrize("case", ["not a 0.27 release", "no dist-info"])
def test_force_patches_an_unknown_version_on_structure_alone(site: Path, case: str) -> None:
    _bad(site, case)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 2
    result = invoke("apply", "--site-packages", str(site), "--force")
    assert result.exit_code == 0, result.output
    assert invoke("check", "--site-packages", str(site), "--force").exit_code == 0


def test_root_mode_patches_a_source_tree_without_dist_info(tmp_path: Path) -> None:
    tree = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    assert invoke("check", "--root", str(tree)).exit_code == 1
    assert invoke("apply", "--root", str(tree)).exit_code == 0
    assert invoke("check", "--root", str(tree)).exit_code == 0


def test_site_packages_and_root_together_are_refused(site: Path) -> None:
    result = invoke("check", "--site-packages", str(site), "--root", str(site))
    assert result.exit_code == 2
    assert "not both" in result.output


def test_read_only_target_is_refused_before_anything_is_written(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, for whom permission bits do not bind.
    real_access = os.access
    read_only = str(site / "vllm/config/vllm.py")
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: False if str(p) == read_only else real_access(p, m, **k)
    )
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "read-only" in result.output and "vllm/config/vllm.py" in result.output
    assert snapshot(site) == before


def test_a_write_failing_part_way_restores_every_file(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash2_backport import engine

    real = engine._atomic_write
    calls = []

    def failing(path: Path, data: bytes, mode: int) -> None:
        calls.append(path)
        if len(calls) == 4:
            raise OSError(28, "No space left on device", str(path))
        real(path, data, mode)

    monkeypatch.setattr(engine, "_atomic_write", failing)
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "restored" in result.output
    assert snapshot(site) == before
    assert not (site / INSTALLED[1]).parent.exists()


def test_permissions_and_crlf_line_endings_are_kept(site: Path) -> None:
    path = site / REGISTRY
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    path.chmod(0o640)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    data = path.read_bytes()
    assert b"DFlash2DraftModel" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_cached_check_answers_without_the_parser_and_notices_changes(site: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    env = dict(os.environ)
    probe = (
        "import sys, runpy; sys.argv = ['dflash2-backport', 'check', '--site-packages', sys.argv[1]];\n"
        "try:\n    runpy.run_module('dflash2_backport', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code, 'libcst' in sys.modules)\n"
    )
    def run() -> str:
        return subprocess.run(
            [sys.executable, "-c", probe, str(site)], capture_output=True, text=True, env=env
        ).stdout.splitlines()[-1]

    assert run() == "exit 1 True"  # first look parses
    assert run() == "exit 1 False"  # same files: answered from the cache
    path = site / REGISTRY
    path.write_text(path.read_text().replace('"DFlashDraftModel": (', '"DFlashDraftModelX": ('))
    assert run() == "exit 2 True"  # a changed file is judged again
    assert script.exists()


def test_installed_console_script_runs_as_a_user_would(site: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    check = subprocess.run([script, "check", "--site-packages", site], capture_output=True, text=True)
    assert check.returncode == 1, check.stderr
    apply = subprocess.run([script, "apply", "--site-packages", site], capture_output=True, text=True)
    assert apply.returncode == 0, apply.stderr
    again = subprocess.run([script, "check", "--site-packages", site, "--json"], capture_output=True, text=True)
    assert again.returncode == 0
    assert json.loads(again.stdout)["action"] == "nothing-to-do"


def test_console_script_prints_no_traceback_for_a_missing_target(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    result = subprocess.run(
        [script, "check", "--site-packages", tmp_path / "nowhere"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
