"""What the tool tells a user: each hint is a command that works as printed
with the options that were given, and each error is one line naming the
path, what is wrong and what to do. One test per hint and per message, each
run through the console script as a user runs it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.vllm_tree.test_interpreter import TOOL, bare_venv, tool
from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels

REPOSITORY = Path(__file__).resolve().parents[2]


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("dflash2-backport: error: "), line
    return line


# -- paths given to --python ------------------------------------------------------


@pytest.mark.parametrize("spelling", ["serve/bin/python", "./serve/bin/python"])
def test_a_relative_python_path_is_the_interpreter_at_that_path_from_here(
    tmp_path: Path, spelling: str
) -> None:
    python, site = bare_venv(tmp_path / "serve")
    make_site("0.27.1", site)
    result = subprocess.run([TOOL, "check", "--python", spelling, "--json"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert Path(json.loads(result.stdout)["target"]) == site.resolve()


def test_python_naming_a_program_that_is_no_python_says_so_without_quoting_the_query(
    tmp_path: Path,
) -> None:
    line = one_error_line(tool("check", "--python", "/bin/ls"))
    assert line.startswith("dflash2-backport: error: /bin/ls: not a Python interpreter"), line
    assert "import" not in line and len(line) < 200, line
    assert "pass --python the Python that runs vLLM" in line, line


def test_python_naming_a_venv_directory_points_at_its_interpreter(tmp_path: Path) -> None:
    python, _ = bare_venv(tmp_path / "serve")
    line = one_error_line(tool("check", "--python", tmp_path / "serve"))
    assert line.startswith(f"dflash2-backport: error: {tmp_path / 'serve'}: a directory, "
                           "not an interpreter"), line
    assert f"--python {python}" in line, line
    assert "Permission denied" not in line


def test_python_naming_a_path_that_does_not_exist_gives_no_example_of_that_path(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "opt" / "venv" / "bin" / "python"
    line = one_error_line(tool("check", "--python", missing))
    assert line.startswith(f"dflash2-backport: error: {missing}: no such interpreter; "), line
    assert line.count(str(missing)) == 1, line
    assert "e.g." not in line


# -- the target --------------------------------------------------------------------


def test_site_packages_on_a_source_tree_points_to_root(tmp_path: Path) -> None:
    tree = make_site("0.27.1", tmp_path / "vllm-src")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    line = one_error_line(tool("check", "--site-packages", tree))
    assert line.startswith(f"dflash2-backport: error: {tree}: no vllm-*.dist-info"), line
    assert f"pass --root {tree}" in line, line


def test_a_read_only_file_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    registry = site / "vllm/model_executor/models/registry.py"
    # Root writes anything: permission bits alone would not stop it.
    probe = (
        "import os, sys\n"
        f"real = os.access\nos.access = lambda p, m, **k: False if str(p) == {str(registry)!r} "
        "else real(p, m, **k)\n"
        "from dflash2_backport.cli.main import main\n"
        "sys.argv = ['dflash2-backport', 'apply', '--site-packages', sys.argv[1]]\nmain()\n"
    )
    before = snapshot(site)
    result = subprocess.run([sys.executable, "-c", probe, str(site)],
                            capture_output=True, text=True)
    line = one_error_line(result)
    assert line.startswith(f"dflash2-backport: error: {registry}: read-only; "), line
    assert "write access" in line and "run the command again" in line, line
    assert snapshot(site) == before


# -- hints -------------------------------------------------------------------------


def _stand_in_vllm(site: Path, module_error: str) -> None:
    """A vllm package that imports, settles on the CPU and registers
    DFlash2DraftModel to a module whose import fails: every verify check
    fails, the registry's on that import."""
    files = {
        "vllm/__init__.py": "__version__ = '0.27.1'\n",
        "vllm/platforms/__init__.py": (
            "class _Cpu:\n    def is_cpu(self):\n        return True\n"
            "current_platform = _Cpu()\n"
        ),
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/models/__init__.py": "",
        "vllm/model_executor/models/registry.py": (
            "import importlib\n"
            "class _Lazy:\n"
            "    def __init__(self, module_name, class_name):\n"
            "        self.module_name, self.class_name = module_name, class_name\n"
            "    def load_model_cls(self):\n"
            "        return getattr(importlib.import_module(self.module_name), self.class_name)\n"
            "class _Registry:\n"
            "    models = {'DFlash2DraftModel': _Lazy(\n"
            "        'vllm.model_executor.models.qwen3_dflash2', 'DFlash2Qwen3ForCausalLM')}\n"
            "    def get_supported_archs(self):\n"
            "        return self.models.keys()\n"
            "    def _try_load_model_cls(self, arch):\n"
            "        try:\n"
            "            return self.models[arch].load_model_cls()\n"
            "        except Exception:\n"
            "            return None\n"
            "ModelRegistry = _Registry()\n"
            "def _run_in_subprocess(fn):\n    return fn()\n"
        ),
        "vllm/model_executor/models/qwen3_dflash2.py": "import torchcodec\n",
        "torchcodec/__init__.py": module_error,
    }
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)


BROKEN_TORCHCODEC = "raise OSError('libtorchcodec_core8.so: cannot open shared object file')\n"


@pytest.fixture
def failing_vllm(tmp_path: Path) -> Path:
    python, site = bare_venv(tmp_path / "serve")
    _stand_in_vllm(site, BROKEN_TORCHCODEC)
    return python


def test_verify_names_the_module_a_registered_architecture_failed_to_load_and_why(
    failing_vllm: Path,
) -> None:
    result = tool("verify", "--python", failing_vllm)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.split()[1:2] == ["registry"]]
    assert "vllm.model_executor.models.qwen3_dflash2" in line, line
    assert "OSError: libtorchcodec_core8.so: cannot open shared object file" in line, line
    assert "'NoneType'" not in line


def test_verifys_failure_line_gives_apply_with_the_python_that_was_given(
    failing_vllm: Path, tmp_path: Path
) -> None:
    result = subprocess.run([TOOL, "verify", "--python", "serve/bin/python"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("failed: "), last
    assert last.endswith("; run `dflash2-backport apply --python serve/bin/python`, "
                         "then verify again"), last


def test_verify_gpus_failure_line_gives_verify_and_check_with_the_python_given() -> None:
    # Without a GPU `verify --gpu` stops before any check: its hint, as
    # `verify` prints it after a failed check.
    from dflash2_backport.verification.gpu_verify import hint

    assert hint(("--python", "/srv/my env/bin/python")) == (
        "`dflash2-backport verify --python '/srv/my env/bin/python'` (on the CPU) and "
        "`dflash2-backport check --python '/srv/my env/bin/python'` say whether the "
        "backport is in place"
    )


def _hook(name: str) -> dict:
    hooks = yaml.safe_load((REPOSITORY / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == name]
    return hook


def test_the_check_hooks_hint_runs_the_apply_hook_through_pre_commit(tmp_path: Path) -> None:
    fork = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(fork.glob("vllm-*.dist-info")))
    # As pre-commit runs the hook: its entry, in the repository's root.
    entry = shlex.split(_hook("dflash2-backport-check")["entry"])
    assert entry[0] == "dflash2-backport"
    result = subprocess.run([TOOL, *entry[1:]], capture_output=True, text=True, cwd=fork,
                            env={**os.environ, "PRE_COMMIT": "1"})
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.endswith(
        "; run `pre-commit run --hook-stage manual dflash2-backport-apply --all-files`"
    ), last


# -- --version ---------------------------------------------------------------------
