"""The README on real vLLM: what it shows `verify` printing is what verify
prints, and its patch recipe for a fork gives a vLLM that `verify` passes.

tests/docs/test_readme.py runs the recipe on the files the edits touch; here the
fork is a whole vLLM 0.27.1 (the pristine venv's package, compiled
extensions and all), run by the CPU base venv's interpreter with the fork on
PYTHONPATH, as a checkout is run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.runtime import env as runtime_env
from tests.runtime.test_runtime_verify import CHECKS, run_verify
from tests.docs.test_readme import code_block, shell

TOOL = Path(sys.executable).with_name("dflash2-backport")


def test_the_verify_run_the_readme_shows_is_what_verify_prints(versioned_venvs, tmp_path):
    patched = runtime_env.venv_python(versioned_venvs("0.27.1")["patched"])
    done, _ = run_verify([TOOL, "verify", "--python", patched], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = code_block("$ dflash2-backport verify --python /opt/venv/bin/python")
    assert shown[0] == "$ dflash2-backport verify --python /opt/venv/bin/python"
    printed = done.stdout.splitlines()
    assert len(printed) == len(shown) - 1 == len(CHECKS) + 2
    # The first line names where vLLM is, the last how long it took: those
    # differ by machine; every check's line is the same.
    header = re.escape(shown[1])
    for path in ("/opt/venv/lib/python3.11/site-packages", "/opt/venv/bin/python"):
        header = header.replace(re.escape(path), ".+")
    assert re.fullmatch(header, printed[0]), (shown[1], printed[0])
    assert [line.strip() for line in shown[2:-1]] == [line.strip() for line in printed[1:-1]]
    said, _, took = shown[-1].rpartition(" in ")
    assert re.fullmatch(r"\d+ s", took), shown[-1]
    assert re.fullmatch(rf"{re.escape(said)} in \d+ s", printed[-1]), printed[-1]


def _fork_of(site_packages: Path, destination: Path) -> Path:
    """A copy of an installed vLLM as a checkout that runs: the Python files
    copied, everything else (compiled extensions) linked, no bytecode."""
    def copy(source: str, target: str) -> None:
        if source.endswith(".py"):
            shutil.copy2(source, target)
        else:
            os.link(source, target)

    destination.mkdir(parents=True)
    shutil.copytree(site_packages / "vllm", destination / "vllm", copy_function=copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    # vLLM asks its own distribution's version as it imports (whether Triton
    # is usable depends on it), so a checkout that runs has metadata beside
    # it, as `pip install -e` gives it.
    (info,) = site_packages.glob("vllm-*.dist-info")
    shutil.copytree(info, destination / info.name)
    return destination


def test_the_readmes_patch_recipe_gives_a_fork_that_verify_passes(versioned_venvs, tmp_path):
    pristine = runtime_env.site_packages(versioned_venvs("0.27.1")["pristine"].resolve())
    lines = [line.partition("#")[0].rstrip() for line in code_block("git apply dflash2.patch")]
    (where,) = [line.split()[1] for line in lines if line.startswith("cd ")]
    home = tmp_path / "home"
    fork = _fork_of(pristine, home / where.replace("~/", ""))
    ran = shell(home, lines)
    assert [status for _, status, _ in ran] == [0, 1, 0], ran
    check = subprocess.run([TOOL, "check", "--root", str(fork)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    base = runtime_env.venv_python(runtime_env.base_env())
    done, _ = run_verify([TOOL, "verify", "--python", base], tmp_path, PYTHONPATH=str(fork))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f" at {fork / 'vllm'} " in done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[-1].startswith(f"verified: {len(CHECKS)} of {len(CHECKS)}")
