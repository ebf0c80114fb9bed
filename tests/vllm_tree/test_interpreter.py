"""Which vLLM the tool works on: the one an interpreter would import.

Every test runs the installed console script as a subprocess, from this
checkout's venv, against vLLM laid out in another interpreter's reach: a venv,
a `.pth` line, a Debian-style dist-packages, the user site, PYTHONPATH, and
editable installs (a `.pth` path line, or an import hook as setuptools writes
it). The expected locations are the directories the tests lay out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.trees import INSTALLED, make_site, snapshot
from tests.wheels import vllm_wheel

pytestmark = pytest.mark.wheels

TOOL = Path(sys.executable).with_name("dflash2-backport")
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))
PY_DIR = f"python{sys.version_info.major}.{sys.version_info.minor}"
REGISTRY = "vllm/model_executor/models/registry.py"
DFLASH2_ENTRY = '"DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")'


def tool(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONUSERBASE", "VIRTUAL_ENV")}
    environ.update(env or {})
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True,
                          env=environ, stdin=subprocess.DEVNULL)


def bare_venv(directory: Path) -> tuple[Path, Path]:
    """A venv without pip (quick to make): its interpreter and site-packages."""
    subprocess.run([str(BASE_PYTHON), "-m", "venv", "--without-pip", str(directory)],
                   check=True)
    return directory / "bin" / "python", directory / "lib" / PY_DIR / "site-packages"


def source_tree(directory: Path) -> Path:
    """vLLM 0.27.1's files as a checkout has them: no dist-info."""
    tree = make_site("0.27.1", directory)
    for dist_info in tree.glob("vllm-*.dist-info"):
        shutil.rmtree(dist_info)
    return tree


# -- where the interpreter finds vllm ----------------------------------------------
#
# Each layout: (tmp) -> (python, environment, directory that holds vllm/,
# expected kind, expected version).


def in_venv(tmp: Path):
    python, site = bare_venv(tmp / "venv")
    make_site("0.27.1", site)
    return python, {}, site, "site-packages", "0.27.1"


def on_a_pth_line(tmp: Path):
    python, site = bare_venv(tmp / "venv")
    elsewhere = make_site("0.27.1", tmp / "elsewhere")
    (site / "extra.pth").write_text(f"{elsewhere}\n")
    return python, {}, elsewhere, "site-packages", "0.27.1"


def in_dist_packages(tmp: Path):
    # Debian's and Ubuntu's system Python (the official vLLM image) install
    # into dist-packages; a .pth line puts one on this interpreter's path.
    python, site = bare_venv(tmp / "venv")
    dist = make_site("0.27.1", tmp / "usr" / "local" / "lib" / PY_DIR / "dist-packages")
    (site / "system.pth").write_text(f"{dist}\n")
    return python, {}, dist, "site-packages", "0.27.1"


def in_user_site(tmp: Path):
    # A venv turns the user site off, so the base interpreter is asked.
    base = tmp / "userbase"
    user_site = make_site("0.27.1", base / "lib" / PY_DIR / "site-packages")
    return BASE_PYTHON, {"PYTHONUSERBASE": str(base)}, user_site, "site-packages", "0.27.1"


def on_pythonpath(tmp: Path):
    python, _ = bare_venv(tmp / "venv")
    tree = source_tree(tmp / "checkout")
    return python, {"PYTHONPATH": str(tree)}, tree, "root", None


LAYOUTS = {
    "venv site-packages": in_venv,
    "a .pth line": on_a_pth_line,
    "dist-packages": in_dist_packages,
    "user site": in_user_site,
    "PYTHONPATH checkout": on_pythonpath,
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_check_python_finds_the_vllm_that_interpreter_imports(tmp_path: Path, layout) -> None:
    python, environ, holder, kind, version = layout(tmp_path)
    result = tool("check", "--python", python, "--json", env=environ)
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert Path(document["target"]) == holder.resolve()
    assert (document["target_kind"], document["vllm_version"]) == (kind, version)


def test_a_bare_python_name_is_the_one_on_path_as_in_a_shell(tmp_path: Path) -> None:
    python, site = bare_venv(tmp_path / "venv")
    make_site("0.27.1", site)
    path = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
    result = tool("check", "--python", "python3", "--json", env={"PATH": path})
    assert result.returncode == 1, result.stdout + result.stderr
    assert Path(json.loads(result.stdout)["target"]) == site.resolve()


def test_the_current_directory_is_not_taken_for_the_interpreters_vllm(tmp_path: Path) -> None:
    python, site = bare_venv(tmp_path / "venv")
    make_site("0.27.1", site)
    checkout = source_tree(tmp_path / "checkout")
    result = subprocess.run([str(TOOL), "check", "--python", str(python), "--json"],
                            capture_output=True, text=True, cwd=checkout)
    assert Path(json.loads(result.stdout)["target"]) == site.resolve()


# -- no vllm, bad interpreters: one line, exit 2 ------------------------------------


def no_vllm_venv(tmp: Path) -> list:
    python, _ = bare_venv(tmp / "venv")
    return ["--python", python]


BAD = {
    # The tool's own venv has no vLLM: the default must point at --python.
    "no option, no vllm here": (lambda tmp: [], ["--python", sys.executable]),
    "an interpreter without vllm": (no_vllm_venv, ["cannot import vllm", "--python"]),
    "no such interpreter": (lambda tmp: ["--python", tmp / "nope" / "python"],
                            ["no such interpreter", "--python"]),
    "not an interpreter": (lambda tmp: ["--python", "/bin/false"],
                           ["not a Python interpreter", "--python"]),
    "two ways to name vLLM": (lambda tmp: ["--python", sys.executable, "--root", tmp],
                              ["give one of", "--python", "--root"]),
}


BAD_RUNS = [
    pytest.param(command, *BAD[name], id=f"{command}: {name}")
    for command in ("check", "apply", "revert", "verify")
    for name in BAD
    # verify takes only --python.
    if not (command == "verify" and name == "two ways to name vLLM")
]


@pytest.mark.parametrize(("command", "arguments", "needles"), BAD_RUNS)
def test_without_a_vllm_to_work_on_the_message_is_one_line_naming_python(
    tmp_path: Path, command: str, arguments, needles
) -> None:
    result = tool(command, *arguments(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("dflash2-backport: error: ")
    for needle in needles:
        assert str(needle) in line, line


# -- a real pip install in another venv ---------------------------------------------


@pytest.fixture
def vllm_venv(tmp_path: Path):
    """vLLM 0.27.1 installed by pip (no dependencies) in a venv of its own;
    removed afterwards: it is 800 MB."""
    directory = tmp_path / "vllm-venv"
    subprocess.run([str(BASE_PYTHON), "-m", "venv", str(directory)], check=True)
    python = directory / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-compile", "--disable-pip-version-check", str(vllm_wheel("0.27.1"))],
                   check=True)
    yield python, directory / "lib" / PY_DIR / "site-packages"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.installs
def test_tool_in_one_venv_patches_vllm_in_another_through_python(vllm_venv) -> None:
    python, site = vllm_venv
    assert sysconfig.get_paths()["purelib"] != str(site)
    assert tool("check", "--python", python).returncode == 1
    applied = tool("apply", "--python", python)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == f"vLLM 0.27.1 at {site.resolve()}"
    again = tool("check", "--python", python)
    assert again.returncode == 0, again.stdout + again.stderr
    assert DFLASH2_ENTRY in (site / REGISTRY).read_text()
    assert all((site / relative).is_file() for relative in INSTALLED)


# -- editable installs -------------------------------------------------------------


def editable_metadata(site: Path, checkout: Path) -> Path:
    """The dist-info pip writes for `pip install -e checkout` (PEP 610)."""
    dist_info = site / "vllm-0.27.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.27.1\n")
    (dist_info / "INSTALLER").write_text("pip\n")
    (dist_info / "direct_url.json").write_text(json.dumps(
        {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    ))
    (dist_info / "RECORD").write_text(
        "".join(f"{dist_info.name}/{name},,\n"
                for name in ("METADATA", "INSTALLER", "direct_url.json", "RECORD"))
        + "__editable__.vllm-0.27.1.pth,,\n"
    )
    return dist_info


def pth_path_line(site: Path, checkout: Path) -> None:
    (site / "__editable__.vllm-0.27.1.pth").write_text(f"{checkout}\n")


def import_hook(site: Path, checkout: Path) -> None:
    # setuptools' strict editable mode: a meta path finder maps the package
    # name to the checkout; nothing of it is on sys.path.
    finder = "__editable___vllm_0_27_1_finder"
    (site / f"{finder}.py").write_text(
        "import importlib.util, sys\n"
        f"PACKAGE = {str(checkout / 'vllm')!r}\n"
        "class Finder:\n"
        "    @classmethod\n"
        "    def find_spec(cls, name, path=None, target=None):\n"
        "        if name != 'vllm':\n"
        "            return None\n"
        "        return importlib.util.spec_from_file_location(\n"
        "            name, PACKAGE + '/__init__.py', submodule_search_locations=[PACKAGE])\n"
        "def install():\n"
        "    sys.meta_path.append(Finder)\n"
    )
    (site / "__editable__.vllm-0.27.1.pth").write_text(f"import {finder}; {finder}.install()\n")


EDITABLE = {".pth path line": pth_path_line, "import hook": import_hook}


@pytest.mark.parametrize("hook", EDITABLE.values(), ids=EDITABLE.keys())
@pytest.mark.parametrize("naming", ["--python", "--site-packages"])
def test_editable_install_is_patched_in_its_checkout_and_site_packages_left_alone(
    tmp_path: Path, hook, naming: str
) -> None:
    python, site = bare_venv(tmp_path / "venv")
    checkout = source_tree(tmp_path / "src" / "vllm")
    editable_metadata(site, checkout)
    hook(site, checkout)
    site_before = snapshot(site)
    name = python if naming == "--python" else site

    applied = tool("apply", naming, name)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == (
        f"vLLM 0.27.1 at {checkout.resolve()} (editable install: its source tree is patched)"
    )
    assert DFLASH2_ENTRY in (checkout / REGISTRY).read_text()
    assert all((checkout / relative).is_file() for relative in INSTALLED)
    assert snapshot(site) == site_before
    assert tool("check", naming, name).returncode == 0


@pytest.mark.parametrize("naming", ["--python", "--site-packages"])
def test_an_editable_checkout_whose_path_has_a_space_is_found_decoded(
    tmp_path: Path, naming: str
) -> None:
    # direct_url.json stores the path as a file:// URL, the space as %20.
    python, site = bare_venv(tmp_path / "venv")
    checkout = source_tree(tmp_path / "my src" / "vllm")
    dist_info = editable_metadata(site, checkout)
    assert "%20" in (dist_info / "direct_url.json").read_text()
    pth_path_line(site, checkout)
    result = tool("check", naming, python if naming == "--python" else site, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert (Path(document["target"]), document["target_kind"]) == (checkout.resolve(), "editable")


def test_editable_install_whose_checkout_is_gone_is_one_line_naming_both(
    tmp_path: Path,
) -> None:
    _, site = bare_venv(tmp_path / "venv")
    checkout = tmp_path / "src" / "vllm"
    dist_info = editable_metadata(site, checkout)
    pth_path_line(site, checkout)
    result = tool("check", "--site-packages", site)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {dist_info.resolve()}: ")
    assert str(checkout) in line and "--root" in line
