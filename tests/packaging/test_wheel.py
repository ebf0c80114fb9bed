"""What a user installs: the wheel holds the tool's package and nothing else,
every module of the sources under the one package, and every file it ships
is one that a command loads."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.checkout import REPOSITORY, copy_of_the_project, wheel_of
from tests.trees import make_site

#: Where each folder of the sources goes in the wheel.
PLACES = {
    "dflash2_backport": "dflash2_backport",
    "modules": "dflash2_backport/modules",
}

# Runs one command as the console script does, with the unpacked wheel first
# on sys.path, and writes down every file of the wheel the process loaded:
# the modules it imported, the files it read, and the files it handed to
# another interpreter (verify runs its probes in vLLM's by path).
TRACE = """\
import atexit, json, os, runpy, sys
root, log = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
seen = set()

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, os.PathLike)):
        seen.add(os.path.abspath(args[0]))
    elif event == "subprocess.Popen":
        seen.update(os.path.abspath(a) for a in args[1] if isinstance(a, str) and a.endswith(".py"))

def write():
    modules = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
               if name.split(".")[0] == "dflash2_backport"}
    with open(log, "w") as out:
        json.dump({"modules": modules, "files": sorted(seen)}, out)

sys.addaudithook(hook)
atexit.register(write)
sys.argv = ["dflash2-backport", *sys.argv[3:]]
runpy.run_module("dflash2_backport", run_name="__main__")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("wheel")
    return wheel_of(copy_of_the_project(scratch / "checkout"), scratch / "dist")


def _shipped(wheel: Path) -> set[str]:
    return {name for name in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in name}


def test_the_wheel_carries_every_judge_and_writer_under_the_one_package(wheel: Path) -> None:
    """modules/ goes in as dflash2_backport.modules, the tool's folders as
    they are: the wheel adds
    one top-level package, and every module of the sources is in it."""
    names = _shipped(wheel)
    assert {name.split("/")[0] for name in names} == {"dflash2_backport"}
    for folder, place in PLACES.items():
        for path in (REPOSITORY / folder).rglob("*.py"):
            assert f"{place}/{path.relative_to(REPOSITORY / folder)}" in names, path


def _sibling_files(probes: Path) -> set[Path]:
    """The files gpu_probes.py loads by path beside itself (`_sibling(NAME)`),
    in vLLM's interpreter, once a GPU is there."""
    return {
        probes.with_name(f"{node.args[0].value}.py")
        for node in ast.walk(ast.parse(probes.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_sibling"
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.wheels
def test_every_file_the_wheel_ships_is_one_a_command_loads(wheel: Path, tmp_path: Path) -> None:
    """check, apply, revert, verify and verify --gpu, run from the unpacked
    wheel on a vLLM 0.27.1 tree (verify's probes fail there: the tree has no
    torch, and there is no GPU; what matters is what each command loads).
    Nothing the wheel ships is left over: no lab code, no stray module."""
    root = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(root)
    site = make_site("0.27.1", tmp_path / "site")
    (tmp_path / "trace.py").write_text(TRACE)
    environment = {**os.environ, "PYTHONPATH": str(site),
                   "DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path / "verdicts")}
    commands = {
        "--version": 0,
        "--explain registry": 0,
        f"check --site-packages {site}": 1,
        f"check --site-packages {site} --json --diff": 1,
        f"apply --site-packages {site}": 0,
        f"revert --site-packages {site} --diff": 0,
        f"verify --python {sys.executable}": 2,
        f"verify --gpu --python {sys.executable} --json": 2,
    }
    loaded: set[Path] = set()
    for number, (command, code) in enumerate(commands.items()):
        log = tmp_path / f"trace-{number}.json"
        result = subprocess.run(
            [sys.executable, str(tmp_path / "trace.py"), str(root), str(log), *command.split()],
            capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120,
        )
        assert result.returncode == code, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        trace = json.loads(log.read_text())
        for name, file in trace["modules"].items():
            assert file is None or Path(file).is_relative_to(root), (command, name, file)
        loaded |= {Path(f) for f in [*trace["modules"].values(), *trace["files"]] if f}
    probes = root / "dflash2_backport" / "verification" / "gpu_probes.py"
    assert probes in loaded
    loaded |= _sibling_files(probes)
    shipped = {root / name for name in _shipped(wheel)}
    assert sorted(str(path.relative_to(root)) for path in shipped - loaded) == []
