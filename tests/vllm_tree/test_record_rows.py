"""RECORD rows are the tool's to write only for the tool's files.

pip uninstalls what RECORD lists: a row the tool added for a file it did not
install would have `pip uninstall vllm` delete it, and a row of vLLM's own
rewritten into another spelling would keep `revert` from giving RECORD back
byte for byte. Each case sets a tree up, runs commands, and compares RECORD
with what it must be.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.faults import run_tool
from tests.trees import make_site
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

MODEL = "vllm/model_executor/models/qwen3_dflash2.py"
PACKAGE = "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py"
REGISTRY = "vllm/model_executor/models/registry.py"
RECORD = "vllm-0.27.1.dist-info/RECORD"


def upstreams_model(site: Path) -> None:
    (site / MODEL).write_bytes((vllm_source("0.28.0") / MODEL).read_bytes())


def the_users_kept_model(site: Path) -> None:
    (site / MODEL).write_text("# dflash2-backport: keep\nprint('my own draft model')\n")


def _edit_record(site: Path, change) -> None:
    path = site / RECORD
    path.write_text(change(path.read_text()))


def registry_row_quoted(site: Path) -> None:
    _edit_record(site, lambda text: text.replace(f"\n{REGISTRY},", f'\n"{REGISTRY}",'))


def registry_row_without_hash(site: Path) -> None:
    _edit_record(site, lambda text: re.sub(rf"\n{re.escape(REGISTRY)},[^\n]*",
                                           f"\n{REGISTRY},,", text))


def registry_row_missing(site: Path) -> None:
    _edit_record(site, lambda text: re.sub(rf"\n{re.escape(REGISTRY)},[^\n]*", "", text))


def a_stale_row_for_a_module(site: Path) -> None:
    _edit_record(site, lambda text: text + f"{PACKAGE},,\n")


SET_UPS = {
    "upstream's model file copied in": upstreams_model,
    "the user's model file, marked to be kept": the_users_kept_model,
    "registry.py's row with its path quoted": registry_row_quoted,
    "registry.py's row without a hash": registry_row_without_hash,
    "registry.py without a row": registry_row_missing,
    "a row for a module that is not there": a_stale_row_for_a_module,
}


@pytest.mark.parametrize("set_up", SET_UPS.values(), ids=SET_UPS.keys())
def test_a_revert_with_nothing_to_undo_leaves_record_as_it_is(tmp_path, set_up) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    set_up(site)
    before = (site / RECORD).read_bytes()
    done = run_tool(["revert", "--site-packages", str(site)])
    assert done.returncode == 0, done.stderr
    assert (site / RECORD).read_bytes() == before


def without_the_stale_row(record: bytes) -> bytes:
    return record.replace(f"{PACKAGE},,\n".encode(), b"")


# The set-ups apply goes through (upstream's file is drift to it), and RECORD
# as revert leaves it: as it was, but for a row of a module's path left by an
# earlier install, which is the tool's once it installs the file there, and
# goes with the file.
APPLIED = [
    (the_users_kept_model, lambda record: record),
    (registry_row_quoted, lambda record: record),
    (registry_row_without_hash, lambda record: record),
    (registry_row_missing, lambda record: record),
    (a_stale_row_for_a_module, without_the_stale_row),
]


@pytest.mark.parametrize("set_up, expected", APPLIED,
                         ids=[name for name, set_up in SET_UPS.items()
                              if set_up is not upstreams_model])
def test_apply_then_revert_gives_record_back_byte_for_byte(tmp_path, set_up, expected):
    site = make_site("0.27.1", tmp_path / "site")
    set_up(site)
    before = (site / RECORD).read_bytes()
    for command in ("apply", "revert"):
        done = run_tool([command, "--site-packages", str(site)])
        assert done.returncode == 0, done.stderr
    assert (site / RECORD).read_bytes() == expected(before)


def test_a_file_the_user_keeps_gets_no_row_and_the_tools_files_do(tmp_path) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    the_users_kept_model(site)
    done = run_tool(["apply", "--site-packages", str(site)])
    assert done.returncode == 0, done.stderr
    listed = {line.split(",")[0] for line in (site / RECORD).read_text().splitlines()}
    assert MODEL not in listed  # pip uninstall must leave the user's file
    assert PACKAGE in listed


def _marked_to_keep(site: Path) -> None:
    path = site / MODEL
    path.write_text("# dflash2-backport: keep\n" + path.read_text() + "# my local fix\n")


@pytest.mark.parametrize("then", ["apply", "revert"])
def test_a_module_the_tool_installed_then_marked_to_keep_loses_its_row(tmp_path, then) -> None:
    """The row `apply` wrote for the file goes once the file is the user's,
    whichever command comes next, and RECORD is vLLM's own again."""
    site = make_site("0.27.1", tmp_path / "site")
    before = (site / RECORD).read_bytes()
    assert run_tool(["apply", "--site-packages", str(site)]).returncode == 0
    _marked_to_keep(site)
    pending = run_tool(["check", "--site-packages", str(site)])
    assert pending.returncode == 1 and "pending   record" in pending.stdout, pending.stdout
    done = run_tool([then, "--site-packages", str(site)])
    assert done.returncode == 0, done.stderr
    listed = {line.split(",")[0] for line in (site / RECORD).read_text().splitlines()}
    assert MODEL not in listed  # pip uninstall must leave the user's file
    if then == "revert":
        assert (site / RECORD).read_bytes() == before
    assert "# my local fix" in (site / MODEL).read_text()


# What a second vllm-*.dist-info holds -> whether the tool refuses the tree.
SECOND_DIST_INFO = {
    # pip uninstall after a killed run: pip removed what RECORD listed, and
    # left the RECORD the run had staged beside it.
    "only a RECORD this tool staged": ({".RECORD.0123abcd.dflash2-backport-new": "x"}, False),
    "a distribution's METADATA": ({"METADATA": "Name: vllm\nVersion: 0.28.0\n"}, True),
    "a staged file and another file": (
        {".RECORD.0123abcd.dflash2-backport-new": "x", "INSTALLER": "pip\n"}, True),
}


@pytest.mark.parametrize(("files", "refused"), SECOND_DIST_INFO.values(), ids=SECOND_DIST_INFO)
def test_a_dist_info_that_holds_only_what_this_tool_staged_is_no_distribution(
    tmp_path, files, refused
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    ghost = site / "vllm-0.26.0.dist-info"
    ghost.mkdir()
    for name, text in files.items():
        (ghost / name).write_text(text)
    done = run_tool(["check", "--site-packages", str(site)])
    if refused:
        assert done.returncode == 2
        assert "two vLLM distributions are recorded" in done.stderr
    else:
        assert done.returncode == 1, done.stderr
        assert "vLLM 0.27.1 at" in done.stdout
