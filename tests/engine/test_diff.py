"""What `--diff` prints is what `apply` writes: the printed diff, saved from
stdout as a user saves it (`check --diff > x.patch`) and applied with `patch`
or `git apply` to a pristine copy of the real vLLM 0.27.1 tree, gives the
same bytes as `apply` on another copy, the new files included."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dflash2_backport.transforms import EDITS
from tests.vllm_tree.test_interpreter import TOOL, tool
from tests.trees import INSTALLED, TARGETS, snapshot
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

RECORD = "vllm-0.27.1.dist-info/RECORD"

PATCHERS = {
    "patch -p1": lambda tree, diff: ["patch", "--quiet", "-p1", "-d", str(tree), "-i", str(diff)],
    "git apply": lambda tree, diff: ["git", "-C", str(tree), "apply", "-p1", str(diff)],
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The printed diff and what `apply` wrote, on two copies of the real tree."""
    scratch = tmp_path_factory.mktemp("diff")
    pristine = shutil.copytree(vllm_source("0.27.1"), scratch / "pristine",
                               ignore=shutil.ignore_patterns(".complete"))
    applied = shutil.copytree(pristine, scratch / "applied")
    diff = scratch / "printed.diff"
    # As typed in a shell: stdout to the file, the report left on stderr.
    saved = subprocess.run(
        ["sh", "-c", 'dflash2-backport check --site-packages "$1" --diff > "$2"', "sh",
         pristine, diff],
        capture_output=True, text=True,
        env={**os.environ, "PATH": f"{TOOL.parent}{os.pathsep}{os.environ['PATH']}"},
    )
    assert saved.returncode == 1, saved.stdout + saved.stderr
    edits = len({e.name for e in EDITS})
    files = len({e.path for e in EDITS})
    assert diff.read_text().startswith("diff --git a/vllm/"), "stdout must hold the diff alone"
    report = saved.stderr.splitlines()
    assert report and report[-1].startswith(f"pending: {edits} edits in {files} files"), (
        f"the report belongs on stderr, found: {saved.stderr!r}")
    as_json = tool("check", "--site-packages", pristine, "--diff", "--json")
    assert json.loads(as_json.stdout)["diff"] == diff.read_text()
    done = tool("apply", "--site-packages", applied)
    assert done.returncode == 0, done.stdout + done.stderr
    yield {"pristine": pristine, "applied": applied, "diff": diff}
    shutil.rmtree(scratch, ignore_errors=True)


def diffed_paths(diff: str) -> set[str]:
    return {
        match.group(1)
        for match in re.finditer(r"^\+\+\+ b/(\S+)", diff, flags=re.MULTILINE)
    }


@pytest.mark.parametrize("patcher", PATCHERS.values(), ids=PATCHERS.keys())
def test_printed_diff_applied_to_the_pristine_tree_gives_what_apply_writes(
    trees: dict[str, Path], tmp_path: Path, patcher
) -> None:
    copy = shutil.copytree(trees["pristine"], tmp_path / "tree")
    subprocess.run(patcher(copy, trees["diff"]), check=True, capture_output=True)
    paths = diffed_paths(trees["diff"].read_text())
    assert paths == {*TARGETS, RECORD, *INSTALLED}
    assert snapshot(copy) == snapshot(trees["applied"])


@pytest.mark.parametrize("patcher", PATCHERS.values(), ids=PATCHERS.keys())
def test_revert_diff_applied_to_a_patched_tree_removes_the_new_files_as_revert_does(
    trees: dict[str, Path], tmp_path: Path, patcher
) -> None:
    reverted = shutil.copytree(trees["applied"], tmp_path / "reverted")
    copy = shutil.copytree(trees["applied"], tmp_path / "tree")
    diff = tmp_path / "revert.diff"
    # `revert` writes as it prints: its patch is applied to another copy.
    printed = tool("revert", "--site-packages", reverted, "--diff")
    assert printed.returncode == 0, printed.stderr
    for relative in INSTALLED:
        assert f"diff --git a/{relative} b/{relative}\ndeleted file mode 100644\n" in printed.stdout
    diff.write_text(printed.stdout)
    subprocess.run(patcher(copy, diff), check=True, capture_output=True)
    assert snapshot(copy) == snapshot(reverted) == snapshot(trees["pristine"])
