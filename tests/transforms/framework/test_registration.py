"""One registration list: every edit has its judge and its writer, everything
that lists the edits' files derives from it or is held to it, and an eighth
edit takes three files and one line."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dflash2_backport.transforms import DECLARATIONS, EDITS, catalogue
from dflash2_backport.transforms.framework import edit as declarations
from dflash2_backport.transforms.framework.source import Source
from dflash2_backport.transforms.framework.vocabulary import Direction
from dflash2_backport.transforms.framework.writing import Writer, writer_for

import dflash2_backport.transforms
from dflash2_backport.vllm_tree import layout

REPOSITORY = Path(__file__).resolve().parents[3]
TRANSFORMS = Path(dflash2_backport.transforms.__file__).resolve().parent


@pytest.mark.parametrize("edit", EDITS, ids=[f"{e.name} {e.path}" for e in EDITS])
def test_every_edit_has_a_judge_for_each_hunk_and_a_writer(edit: declarations.Edit) -> None:
    for direction in Direction:
        judged = edit.judged(Source("pass\n"), direction)
        assert list(judged) == [h.name for h in edit.hunks]
    writer = writer_for(edit)
    assert writer.EDIT is edit
    assert writer.forward is not Writer.forward and writer.backward is not Writer.backward
    assert all(h.where and h.why for h in edit.hunks)


@pytest.mark.parametrize(("declaration", "edit"), list(zip(DECLARATIONS, EDITS)), ids=DECLARATIONS)
def test_an_edit_lives_in_the_folder_named_as_it_is(declaration: str, edit: declarations.Edit) -> None:
    # Python's spelling of the name: `draft-max-position` in draft_max_position/.
    folder = declaration.split(":")[0]
    assert folder == edit.name.replace("-", "_")
    assert edit.writer.split(":")[0] == folder


def _defined(directory: Path, kind: str) -> set[str]:
    """"folder:NAME" for each module-level `NAME = Edit(...)` in an edit's
    judge.py (kind "Edit") or each class that names its `EDIT = ...` in its
    writer.py (kind "Writer": a writer; its bases may be shared ones), in
    the folders of the edits in `directory`."""
    found = set()
    module = {"Edit": "judge.py", "Writer": "writer.py"}[kind]
    for path in directory.glob(f"*/{module}"):
        folder = path.parent.name
        for node in ast.parse(path.read_text()).body:
            if kind == "Edit" and isinstance(node, ast.Assign):
                call = node.value
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                    if call.func.id == "Edit":
                        found |= {f"{folder}:{t.id}" for t in node.targets}  # type: ignore[attr-defined]
            if kind == "Writer" and isinstance(node, ast.ClassDef):
                names = {t.id for a in node.body if isinstance(a, ast.Assign)
                         for t in a.targets if isinstance(t, ast.Name)}
                if "EDIT" in names:
                    found.add(f"{folder}:{node.name}")
    return found


def test_every_declared_edit_and_writer_is_registered() -> None:
    assert _defined(TRANSFORMS / "edits", "Edit") == set(DECLARATIONS)
    assert _defined(TRANSFORMS / "edits", "Writer") == {f"{e.writer}" for e in EDITS}


def test_the_hook_pattern_is_the_one_derived_from_the_edits() -> None:
    pattern = layout.hook_files_pattern()
    hooks = yaml.safe_load((REPOSITORY / ".pre-commit-hooks.yaml").read_text())
    for hook in hooks:
        assert hook["files"] == pattern, f"set `files: &backport-files {pattern}`"
    every = (*layout.TARGET_FILES, *layout.MODULE_FILES)
    assert all(re.search(pattern, path) for path in every)
    for near in ("vllm/config/vllm.pyc", "vllm/model_executor/models/qwen3_dflash3.py",
                 "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py", "xvllm/config/vllm.py"):
        assert not re.search(pattern, near), near


def test_the_readme_table_is_the_one_derived_from_the_edits() -> None:
    readme = (REPOSITORY / "README.md").read_text()
    assert catalogue.edits_table() in readme


def test_the_file_lists_come_from_the_declarations() -> None:
    from tests import trees
    from tests.runtime import test_runtime_install

    files = {e.path for e in EDITS}
    assert set(layout.TARGET_FILES) == set(trees.TARGETS) == files
    assert test_runtime_install.TARGET_FILES == files
    assert test_runtime_install.NEW_FILES == set(trees.INSTALLED) == set(layout.MODULE_FILES)


# -- an eighth edit ---------------------------------------------------------------

DUMMY_EDIT = '''\
"""A scratch edit: `FLAG = True` right after `ANCHOR = 1`."""

from __future__ import annotations

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.meaning import same_meaning
from ...framework.source import Source

HUNK = Hunk(
    "flag",
    "module level, right after `ANCHOR = 1`",
    None,
    "FLAG = True\\n",
    "A scratch edit shows what an eighth edit takes.",
)


def judge(source: Source) -> dict[str, Judged]:
    statements = source.module.statements()
    anchor = exactly_one(
        [s for s in statements if same_meaning(s.node, "ANCHOR = 1")], "one `ANCHOR = 1`"
    )
    if isinstance(anchor, Judged):
        return {HUNK.name: anchor}
    flags = [s for s in statements if same_meaning(s.node, HUNK.after)]
    if not flags:
        return {HUNK.name: pending(Site(path=anchor.pinned()))}
    if [f.path[-1].index for f in flags] == [anchor.path[-1].index + 1]:
        return {HUNK.name: applied(Site(path=flags[0].pinned()))}
    return {HUNK.name: drift("`FLAG = True` right after `ANCHOR = 1`", "it elsewhere")}


DUMMY_FLAG = Edit(
    "dummy-flag",
    "vllm/dummy_flag.py",
    "FLAG follows ANCHOR",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="dummy_flag:DummyFlag",
)
'''
DUMMY_WRITER = '''\
"""Writes the scratch edit."""

from __future__ import annotations

from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate
from .judge import DUMMY_FLAG


class DummyFlag(Writer):
    EDIT = DUMMY_FLAG

    def forward(self, tree, hunk, site):
        anchor = locate(tree, site.path)
        return anchor.replaced(anchor.statement, self.statement(hunk.after))

    def backward(self, tree, hunk, site):
        return locate(tree, site.path).replaced()
'''
REGISTERED = "DECLARATIONS = ("
PROBE = """\
import json, sys
sys.path.insert(0, sys.argv[1])
import dflash2_backport
assert dflash2_backport.__file__.startswith(sys.argv[1]), dflash2_backport.__file__
from dflash2_backport.vllm_tree import layout
from dflash2_backport.cli.main import app
if sys.argv[2] == "lists":
    print(json.dumps({
        "seams": layout.SEAMS, "targets": layout.TARGET_FILES,
        "pattern": layout.hook_files_pattern(),
        "rank": layout.commit_rank("vllm/dummy_flag.py", revert=False),
    }))
else:
    app(sys.argv[2:], prog_name="dflash2-backport")
"""


@pytest.mark.wheels
def test_an_eighth_edit_takes_three_files_and_one_line(tmp_path: Path) -> None:
    from tests.trees import make_site

    copy = tmp_path / "copy"
    package = copy / "dflash2_backport"
    ignore = shutil.ignore_patterns("__pycache__")
    # Laid out as the wheel installs it.
    shutil.copytree(REPOSITORY / "dflash2_backport", package, ignore=ignore)
    for folder in ("transforms", "modules"):
        shutil.copytree(REPOSITORY / folder, package / folder, ignore=ignore)
    # The edit's folder: its judge and its writer (its tests are elsewhere) ...
    folder = package / "transforms/edits/dummy_flag"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""dummy-flag."""\n')
    (folder / "judge.py").write_text(DUMMY_EDIT)
    (folder / "writer.py").write_text(DUMMY_WRITER)
    # ... and one line in the one list.
    registration = package / "transforms/edits/__init__.py"
    text = registration.read_text()
    start = text.index(REGISTERED)
    end = text.index("\n)\n", start)
    registration.write_text(text[:end] + '\n    "dummy_flag:DUMMY_FLAG",' + text[end:])

    tree = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    target = tree / "vllm/dummy_flag.py"
    target.write_text("ANCHOR = 1\n\nOTHER = 2\n")
    original = target.read_bytes()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", PROBE, str(copy), *args],
            capture_output=True,
            text=True,
            env={"DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path / "verdicts"), "PATH": "/usr/bin:/bin"},
        )

    lists = json.loads(run("lists").stdout)
    assert "vllm/dummy_flag.py" in lists["seams"] and "vllm/dummy_flag.py" in lists["targets"]
    assert re.search(lists["pattern"], "vllm/dummy_flag.py")
    assert lists["rank"] < len(lists["targets"])

    checked = run("check", "--root", str(tree), "--json")
    assert checked.returncode == 1, checked.stderr
    (dummy,) = [e for e in json.loads(checked.stdout)["edits"] if e["edit"] == "dummy-flag"]
    assert dummy["state"] == "pending"
    assert dummy["hunks"][0]["why"] == "A scratch edit shows what an eighth edit takes."

    applied = run("apply", "--root", str(tree))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "dummy-flag" in applied.stdout
    assert target.read_text() == "ANCHOR = 1\nFLAG = True\n\nOTHER = 2\n"
    assert run("check", "--root", str(tree)).returncode == 0

    explained = run("--explain", "dummy-flag")
    assert explained.returncode == 0 and "A scratch edit shows" in explained.stdout

    reverted = run("revert", "--root", str(tree))
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert target.read_bytes() == original


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _writes(path: Path) -> bool:
    return path.name == "writer.py" or path.is_relative_to(TRANSFORMS / "framework" / "writing")


def _reaches_out_of_transforms(path: Path) -> bool:
    depth = len(path.relative_to(TRANSFORMS).parts)
    return any(
        isinstance(node, ast.ImportFrom) and node.level > depth
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_only_the_writers_import_libcst_and_the_edits_import_nothing_of_the_tool() -> None:
    package = Path(dflash2_backport.__file__).parent
    for path in [*package.rglob("*.py"), *TRANSFORMS.rglob("*.py")]:
        if not (path.is_relative_to(TRANSFORMS) and _writes(path)):
            assert "libcst" not in _imports(path), path
    for path in TRANSFORMS.rglob("*.py"):
        assert "dflash2_backport" not in _imports(path), path
        assert not _reaches_out_of_transforms(path), path


# -- what the declarations tell people ------------------------------------------


def test_explain_says_each_hunks_place_reason_and_code() -> None:
    from dflash2_backport.transforms.edits.registry.judge import ENTRY_VALUE, HUNK
    from typer.testing import CliRunner

    from dflash2_backport.cli.main import app

    result = CliRunner().invoke(app, ["--explain", "registry"])
    assert result.exit_code == 0
    assert f"where: {HUNK.where}" in result.output
    assert "`DFlash2DraftModel` resolves to the new module;" in result.output
    assert ENTRY_VALUE in result.output


def test_explain_of_an_unknown_edit_names_the_known_ones() -> None:
    from typer.testing import CliRunner

    from dflash2_backport.cli.main import app

    result = CliRunner().invoke(app, ["--explain", "regsitry"])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert "'regsitry'" in line and "registry, vocab-parallel-topk" in line


@pytest.mark.wheels
def test_the_json_report_gives_each_hunks_why(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dflash2_backport.cli.main import app
    from tests.trees import make_site

    site = make_site("0.27.1", tmp_path / "site")
    result = CliRunner().invoke(app, ["check", "--site-packages", str(site), "--json"])
    reported = {
        (e["edit"], h["hunk"]): h["why"] for e in json.loads(result.output)["edits"] for h in e["hunks"]
    }
    assert reported == {(e.name, h.name): h.why for e in EDITS for h in e.hunks}
