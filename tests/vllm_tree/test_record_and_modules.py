"""vLLM's RECORD, the installed modules and their bytecode, judged from outside.

Expected RECORD rows are computed here with hashlib and base64, as pip's
wheel format defines them, never with the tool's own row function.
"""

from __future__ import annotations

import base64
import compileall
import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from tests.vllm_tree.test_interpreter import bare_venv
from tests.trees import INSTALLED, TARGETS, make_site, snapshot

pytestmark = pytest.mark.wheels

RECORD = "vllm-0.27.1.dist-info/RECORD"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def wheel_row(relative: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    return f"{relative},sha256={digest},{len(data)}"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_record_rows_match_the_patched_and_added_files(site: Path) -> None:
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    rows = (site / RECORD).read_text().splitlines()
    for relative in (*TARGETS, *INSTALLED):
        assert wheel_row(relative, (site / relative).read_bytes()) in rows, relative
    assert not [r for r in rows if "dflash2-backport" in r.split(",")[0]]


def test_a_stale_record_row_is_pending_and_apply_makes_it_true(site: Path) -> None:
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    record = site / RECORD
    target = TARGETS[2]
    true_row = wheel_row(target, (site / target).read_bytes())
    stale_row = wheel_row(target, b"what 0.27.1 shipped")
    record.write_text(record.read_text().replace(true_row, stale_row))
    check = invoke("check", "--site-packages", str(site))
    assert check.exit_code == 1, check.output
    assert check.output.splitlines()[-2].split() == ["pending", "record", RECORD]
    # The summary says what is pending: RECORD, not "0 edits in 0 files".
    assert check.output.splitlines()[-1] == (
        f"pending: {RECORD} does not match the files; "
        f"run `dflash2-backport apply --site-packages {site}`"
    )
    applied = invoke("apply", "--site-packages", str(site))
    assert applied.exit_code == 0, applied.output
    assert applied.output.splitlines()[-1] == (
        f"updated {RECORD} to match the files; 1 file written"
    )
    rows = record.read_text().splitlines()
    assert true_row in rows and stale_row not in rows


def test_rows_appended_to_a_crlf_record_end_in_crlf_and_revert_restores_it(site: Path) -> None:
    record = site / RECORD
    record.write_bytes(record.read_bytes().replace(b"\n", b"\r\n"))
    pristine = snapshot(site)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    data = record.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n")
    assert wheel_row(INSTALLED[0], (site / INSTALLED[0]).read_bytes()).encode() + b"\r\n" in data
    assert invoke("revert", "--site-packages", str(site)).exit_code == 0
    assert snapshot(site) == pristine


def test_a_record_without_a_final_newline_gets_whole_rows_that_pip_uninstalls(
    tmp_path: Path,
) -> None:
    python, site = bare_venv(tmp_path / "venv")
    make_site("0.27.1", site)
    record = site / RECORD
    record.write_bytes(record.read_bytes().rstrip(b"\n"))
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    # Read as pip reads it: csv rows of path, hash, size.
    rows = list(csv.reader(record.read_text().splitlines()))
    assert [row for row in rows if len(row) != 3] == []
    for relative in INSTALLED:
        assert wheel_row(relative, (site / relative).read_bytes()).split(",") in rows
    # The venv has no pip of its own: this checkout's pip works on it.
    uninstall = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check",
         "uninstall", "--yes", "vllm"],
        capture_output=True, text=True,
    )
    assert uninstall.returncode == 0, uninstall.stdout + uninstall.stderr
    assert [p for p in site.rglob("*") if p.is_file()] == []


def test_no_record_is_no_refusal_but_the_report_says_pip_will_not_know(site: Path) -> None:
    (site / RECORD).unlink()
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 0, result.output
    assert "has no RECORD: pip will not know about the installed modules" in result.output
    assert (site / INSTALLED[2]).exists()


def test_the_marker_counts_only_in_a_module_s_header(site: Path) -> None:
    from dflash2_backport.vllm_tree.installer import MARKER

    path = site / INSTALLED[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    someone_elses = b"".join(b"x = %d\n" % i for i in range(40)) + MARKER + b"\n"
    path.write_bytes(someone_elses)
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 2
    assert any(
        line.split()[:3] == ["drift", "new", "file"] and INSTALLED[0] in line
        for line in result.output.splitlines()
    ), result.output
    assert path.read_bytes() == someone_elses


def test_revert_removes_the_bytecode_of_modules_that_were_imported(site: Path) -> None:
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    for relative in INSTALLED:
        assert compileall.compile_file(str(site / relative), quiet=2)
    models_cache = (site / INSTALLED[0]).parent / "__pycache__"
    assert list(models_cache.glob("qwen3_dflash2.*.pyc"))
    other = models_cache / "registry.cpython-311.pyc"
    other.write_bytes(b"someone else's bytecode")
    assert invoke("revert", "--site-packages", str(site)).exit_code == 0
    assert not list(models_cache.glob("qwen3_dflash2.*.pyc"))
    assert not (site / INSTALLED[1]).parent.exists()
    assert other.exists()
