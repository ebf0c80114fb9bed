"""The tool's folders, and the one way their imports run: each folder of
dflash2_backport/ imports only the folders below it, the edits
(transforms/, whose own test is in tests/transforms/framework/test_registration.py)
import nothing of the tool, and the files verify runs by path in vLLM's
interpreter import nothing of it either."""

from __future__ import annotations

import ast
from pathlib import Path

import dflash2_backport

PACKAGE = Path(dflash2_backport.__file__).resolve().parent

#: Bottom first: a folder may import the folders before it, never one after.
FOLDERS = [
    "utils",  # errors, signals, the files of a tree, colour
    "vllm_tree",  # finding vLLM: where, which version, its files, RECORD, the new modules
    "transaction",  # the commit, its lock, what it may write, recovery from a kill
    "engine",  # judging each file and planning what a command writes
    "verification",  # verify and verify --gpu, and the probes they run in vLLM
    "cli",  # the commands and their report
]
#: Run by path in vLLM's interpreter, where the tool is not installed.
BY_PATH = ["verification/probes.py", "verification/gpu_probes.py", "verification/checkpoints.py"]


def _imported(path: Path) -> set[tuple[str, ...]]:
    """The tool's modules and packages `path` imports, as parts under
    dflash2_backport, wherever in the file (TYPE_CHECKING and function
    bodies included)."""
    package = path.relative_to(PACKAGE).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            module = tuple(node.module.split(".")) if node.module else ()
            found |= {(*base, *module, alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash2_backport"):
            found |= {(*node.module.split(".")[1:], alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {tuple(alias.name.split(".")[1:]) for alias in node.names
                      if alias.name.split(".")[0] == "dflash2_backport"}
    return found


def _folder(parts: tuple[str, ...]) -> str | None:
    """The folder of a module or a name by its parts; None at the top."""
    return parts[0] if parts and (PACKAGE / parts[0]).is_dir() else None


def test_every_folder_of_the_package_has_its_place() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders - {"transforms", "modules"} == set(FOLDERS)


def test_the_folders_import_one_way() -> None:
    arrows = set()
    for path in PACKAGE.rglob("*.py"):
        here = _folder(path.relative_to(PACKAGE).parts)
        for imported in _imported(path):
            there = _folder(imported)
            if here in FOLDERS and there in FOLDERS and here != there:
                arrows.add((here, there))
    upward = sorted((a, b) for a, b in arrows if FOLDERS.index(b) > FOLDERS.index(a))
    assert upward == []
    assert _imported(PACKAGE / "__init__.py") == set()


def test_the_files_verify_runs_by_path_import_nothing_of_the_tool() -> None:
    for name in BY_PATH:
        assert _imported(PACKAGE / name) == set(), name
