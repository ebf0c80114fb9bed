"""Installing the tool into the venv that runs vLLM changes nothing that venv
already has.

vLLM 0.27.1's environment, as pip makes it for a user, is what the runtime
tests' venvs hold: tests/runtime/constraints.txt pins it. The tool installed
from its wheel beside those pins may add packages, never move one.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.trees import make_site

pytestmark = [pytest.mark.wheels, pytest.mark.installs]

REPOSITORY = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPOSITORY / "tests" / "runtime" / "constraints.txt"


def vllm_environment_pins() -> dict[str, str]:
    """Distribution name (normalised) -> the version vLLM's venv holds."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.partition("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalised(name)] = version
    return pins


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def the_tools_requirements() -> list[Requirement]:
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


@pytest.mark.parametrize("requirement", the_tools_requirements(), ids=str)
def test_each_requirement_of_the_tool_accepts_what_vllms_environment_holds(
    requirement: Requirement,
) -> None:
    held = vllm_environment_pins().get(normalised(requirement.name))
    if held is not None:
        assert requirement.specifier.contains(held, prereleases=True), (
            f"{requirement} would replace {requirement.name} {held} in vLLM's venv"
        )


def _freeze(python: Path) -> dict[str, str]:
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        check=True, capture_output=True, text=True,
    ).stdout
    return {
        normalised(name): version
        for name, _, version in (line.partition("==") for line in listed.splitlines())
    }


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [python, "-m", "pip", "--quiet", "--disable-pip-version-check", *args], check=True
    )


def _wheel(scratch: Path) -> Path:
    """The tool's wheel, built from a copy of the sources as pip builds it."""
    source = scratch / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPOSITORY / name, source / name)
    for name in ("dflash2_backport", "transforms", "modules"):
        shutil.copytree(REPOSITORY / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--wheel-dir", str(scratch / "dist"), str(source)],
        check=True,
    )
    (wheel,) = (scratch / "dist").glob("dflash2_backport-*.whl")
    return wheel


def test_pip_install_of_the_wheel_into_vllms_environment_moves_no_package(
    tmp_path: Path,
) -> None:
    wheel = _wheel(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    # Every distribution the tool's install reaches that vLLM's venv holds,
    # installed first at the version that venv has.
    report = tmp_path / "report.json"
    _pip(python, "install", "--dry-run", "--ignore-installed", "--report", str(report),
         str(wheel))
    reached = {normalised(item["metadata"]["name"])
               for item in json.loads(report.read_text())["install"]}
    pins = vllm_environment_pins()
    held = sorted(f"{name}=={pins[name]}" for name in reached & pins.keys())
    assert held, "vLLM's environment holds nothing the tool's install reaches"
    _pip(python, "install", "--constraint", str(CONSTRAINTS), *held)
    before = _freeze(python)

    _pip(python, "install", str(wheel))

    after = _freeze(python)
    moved = {name: (version, after.get(name)) for name, version in before.items()
             if after.get(name) != version}
    assert moved == {}, f"installing the tool changed vLLM's venv: {moved}"
    assert "dflash2-backport" in after

    # The tool runs with the typer it found there: a plain line, and the
    # lines typer's parser takes.
    site = make_site("0.27.1", tmp_path / "site")
    script = python.with_name("dflash2-backport")
    ran = {
        name: subprocess.run([script, *argv], capture_output=True, text=True)
        for name, argv in {
            "check": ["check", "--site-packages", str(site)],
            "a typo": ["check", "--sit-packages", str(site)],
            "help": ["check", "--help"],
        }.items()
    }
    assert ran["check"].returncode == 1, ran["check"].stderr
    assert ran["check"].stdout.splitlines()[-1].startswith("pending: ")
    assert ran["a typo"].returncode == 2
    (line,) = ran["a typo"].stderr.splitlines()
    assert line.startswith("dflash2-backport: error: `dflash2-backport check`: "), line
    assert ran["help"].returncode == 0 and "--site-packages PATH" in ran["help"].stdout
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)
