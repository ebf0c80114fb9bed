"""The edits' hunk files: each is Python that parses, and each is one of
its edit's hunks, named as the hunk and the release whose form it holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dflash2_backport.transforms
from dflash2_backport.transforms import EDITS
from dflash2_backport.transforms.framework.hunk_files import (
    class_body,
    file_name,
    out_of_class,
    statements_of,
)

EDITS_DIRECTORY = Path(dflash2_backport.transforms.__file__).resolve().parent / "edits"
HUNK_FILES = sorted(EDITS_DIRECTORY.glob("*/hunks/**/*.*"))
# Found where the tests run from: none would leave every test below unrun.
assert HUNK_FILES, EDITS_DIRECTORY
RELEASE_FORM = re.compile(r"\d+\.\d+\.\d+(\.patched)?\.py")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(EDITS_DIRECTORY)) for p in paths]


@pytest.mark.parametrize("path", HUNK_FILES, ids=_ids(HUNK_FILES))
def test_a_hunk_file_is_python_that_parses(path: Path) -> None:
    ast.parse(path.read_bytes(), str(path))


@pytest.mark.parametrize("path", HUNK_FILES, ids=_ids(HUNK_FILES))
def test_a_hunk_file_is_named_as_a_hunk_of_its_edit_and_a_release(path: Path) -> None:
    folder = path.relative_to(EDITS_DIRECTORY).parts[0]
    hunks = {file_name(h.name) for e in EDITS if e.writer.split(":")[0] == folder for h in e.hunks}
    assert path.parent.name in hunks
    assert path.parent.parent.name == "hunks"
    assert RELEASE_FORM.fullmatch(path.name)


@pytest.mark.parametrize(
    ("hunk", "folder"),
    [
        ("imports", "imports"),
        ("grouped conv kernel", "grouped_conv_kernel"),
        ("gumbel_block_argmax salts a draft's position", "gumbel_block_argmax_salts_a_draft_s_position"),
        ("a DFlash2 draft forces the V2 model runner", "a_dflash2_draft_forces_the_v2_model_runner"),
    ],
)
def test_a_hunks_folder_is_its_name_in_lowercase_words(hunk: str, folder: str) -> None:
    assert file_name(hunk) == folder


def test_statements_of_a_hunk_keep_decorators_and_inner_blank_lines() -> None:
    code = "import a\n\n\n@d\ndef f():\n    x = 1\n\n    return x\n\n\nY = 2\n"
    assert statements_of(code) == ["import a\n", "@d\ndef f():\n    x = 1\n\n    return x\n", "Y = 2\n"]


def test_a_class_body_hunk_is_the_body_at_class_depth() -> None:
    assert class_body("class C(B):\n    def m(self):\n        pass\n") == "    def m(self):\n        pass\n"


def test_statements_of_a_hunk_keep_the_comments_above_each() -> None:
    code = "# why A\nA = frozenset(\n    {1}\n)\n\n\ndef f():\n    pass\n"
    assert statements_of(code) == ["# why A\nA = frozenset(\n    {1}\n)\n", "def f():\n    pass\n"]


def test_a_method_out_of_its_class_keeps_its_docstrings_later_lines_as_content() -> None:
    code = 'class C(B):\n    def m(self):\n        """One.\n\n        Two.\n        """\n        return 1\n'
    assert out_of_class(code) == 'def m(self):\n    """One.\n\n        Two.\n        """\n    return 1\n'
