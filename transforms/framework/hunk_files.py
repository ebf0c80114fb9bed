"""An edit's hunks as source files: the code each hunk finds and leaves, kept
as Python beside the edit so that it reads, diffs and lints as code.

Each edit folder holds `hunks/<hunk>/<release>.py` (the hunk's name as
`file_name` spells it), the hunk's code as that release ships it (absent
where the hunk adds code of its own), and `hunks/<hunk>/<release>.patched.py`,
the code the edit leaves there. The
files are vLLM's code, not the tool's: ruff and pytest leave them alone
(pyproject.toml), and the wheel ships them as package data, read here
from the edit's folder.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap

from .edit import Hunk

#: The release whose form the edits are written against.
RELEASE = "0.27.1"
#: Every hunk file read, by its path under the edits' package, with its
#: bytes: with the judges' modules, what decides a verdict (the verdict
#: cache's key covers both).
READ: dict[str, bytes] = {}


def file_name(hunk: str) -> str:
    """The name of a hunk's folder: its name, lowercase, one `_` for each
    run of anything but letters and digits."""
    return re.sub(r"[^0-9a-z]+", "_", hunk.lower()).strip("_")


def statements_of(code: str, comments: bool = True) -> list[str]:
    """A hunk's top-level statements, each as the file writes it: the
    comments right above it (unless `comments` is false), its decorators and
    its lines, without the blank lines that set it apart."""
    lines = code.splitlines(keepends=True)
    statements, start = [], 0
    for node in ast.parse(code).body:
        first = start if comments else _first_line(node) - 1
        while first < _first_line(node) - 1 and not lines[first].strip():
            first += 1
        statements.append("".join(lines[first : node.end_lineno]))
        start = node.end_lineno or start
    return statements


def test_and_body(arm: str) -> tuple[str, str]:
    """A hunk that is one `if` arm: its test and its body (dedented), each as
    the file writes it."""
    (statement,) = ast.parse(arm).body
    assert isinstance(statement, ast.If) and not statement.orelse
    test = ast.get_source_segment(arm, statement.test)
    assert test is not None
    body = arm.splitlines(keepends=True)[statement.body[0].lineno - 1 :]
    return test, textwrap.dedent("".join(body))


def class_body(code: str) -> str:
    """A hunk written inside the class it belongs to (so that its file is
    Python of its own): the class's body, at class-body depth."""
    header, body = code.split("\n", 1)
    assert header.startswith("class ") and header.endswith(":"), header
    return body


def out_of_class(code: str) -> str:
    """A hunk written inside its class, taken out to module level: its code
    dedented by the class body's indentation, but not the lines inside a
    string, which are the string's content (a docstring's later lines keep
    the depth they have in the class)."""
    body = class_body(code)
    depth = len(body) - len(body.lstrip(" "))
    # Line numbers of `code`, whose first line is the class's header.
    content = {
        number - 1
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for number in range(node.lineno + 1, (node.end_lineno or node.lineno) + 1)
    }
    return "".join(
        line if number in content else line[depth:] if line.strip() else line
        for number, line in enumerate(body.splitlines(keepends=True), start=1)
    )


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


class HunkFiles:
    """The hunk files of the edit package `package` (its `__package__`),
    read as it is made: every command reads them all."""

    def __init__(self, package: str) -> None:
        folder = package.rpartition(".")[2]
        # The wheel installs them as files, beside the edit's modules.
        edit = os.path.dirname(sys.modules[package].__file__ or "")
        self._files = _read_directory(os.path.join(edit, "hunks"))
        for (hunk, name), data in self._files.items():
            READ[f"{folder}/hunks/{hunk}/{name}"] = data

    def hunk(self, name: str, where: str, why: str) -> Hunk:
        """The hunk `name` in 0.27.1's form, from its files: the code it
        finds (None where it adds code of its own) and the code it leaves."""
        shipped = (file_name(name), f"{RELEASE}.py") in self._files
        before = self.shipped(name) if shipped else None
        return Hunk(name, where, before, self.patched(name), why)

    def forms(self, hunk: str, *releases: str) -> list[tuple[str, str, str]]:
        """The hunk in other releases' forms, as `in_place.judge_definition`
        takes them: ("vLLM X", its code as X ships it, as the fix leaves it)."""
        return [
            (f"vLLM {release}", self.shipped(hunk, release), self.patched(hunk, release))
            for release in releases
        ]

    def shipped(self, hunk: str, release: str = RELEASE) -> str:
        """The hunk's code as `release` ships it."""
        return self._read(hunk, f"{release}.py")

    def patched(self, hunk: str, release: str = RELEASE) -> str:
        """The hunk's code as the edit leaves it on `release`."""
        return self._read(hunk, f"{release}.patched.py")

    def _read(self, hunk: str, name: str) -> str:
        # Decoded as they are: a universal-newline read would turn a hunk's
        # own "\r" into a line break.
        return self._files[file_name(hunk), name].decode("utf-8")


def _read_directory(hunks: str) -> dict[tuple[str, str], bytes]:
    """Each file of the hunk folders under `hunks`, by (folder, name): read
    with os, a fraction of what a Traversable costs for each file."""
    files = {}
    for hunk in os.scandir(hunks):
        if not hunk.is_dir() or hunk.name == "__pycache__":
            continue
        for file in os.scandir(hunk.path):
            if file.is_file():
                with open(file.path, "rb") as handle:
                    files[hunk.name, file.name] = handle.read()
    return files
