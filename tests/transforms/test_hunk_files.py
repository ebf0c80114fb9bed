"""The edits' hunk files: each is Python that parses, and each is one of
its edit's hunks, named as the hunk and the release whose form it holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dflash2_backport
from dflash2_backport.transforms import EDITS
from dflash2_backport.transforms.framework.hunk_files import file_name

EDITS_DIRECTORY = Path(dflash2_backport.__file__).resolve().parent / "transforms" / "edits"
HUNK_FILES = sorted(EDITS_DIRECTORY.glob("*/hunks/**/*.*"))
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
