"""`dflash2-backport verify` on real vLLM 0.27.1 and 0.27.0: it fails on the
release as it ships, naming what is missing, and passes once `apply` ran.

The command runs as users run it: the console script of this checkout's venv
(the tool) pointed with --python at a venv that has vLLM (not the tool's), and
the patched venv's own console script with no option at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime import env as runtime_env

pytestmark = pytest.mark.runtime

CHECKS = ["registry", "causality", "v2-runner", "speculator", "top-k", "kernels"]
# What an unpatched vLLM lacks, as each failing line must name it.
MISSING = {
    "registry": ["DFlash2DraftModel"],
    "causality": ["DFlash2DraftModel"],
    "v2-runner": ["DFlash2DraftModel"],
    "speculator": ["DFlash2DraftModel"],
    "top-k": ["get_top_k_tokens"],
    "kernels": ["gumbel_noised_argmax", "qwen3_dflash2", "spec_decode.dflash2"],
}
# Well under a minute, as promised; generous for a busy two-core machine.
WALL_LIMIT = 60.0

TOOL = Path(sys.executable).with_name("dflash2-backport")


def run_verify(command: list, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    environ = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("VLLM_", "PYTHON", "VIRTUAL_ENV"))
    }
    environ["TMPDIR"] = str(tmp_path)
    started = time.monotonic()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                          env=environ, stdin=subprocess.DEVNULL, timeout=300)
    return done, time.monotonic() - started


def check_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """name -> (pass/FAIL, detail) from the human output."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in ("pass", "FAIL") and line.startswith("  "):
            found[parts[1]] = (parts[0], parts[2])
    return found


@pytest.fixture(params=runtime_env.VLLM_VERSIONS, scope="module")
def version(request) -> str:
    return request.param


def test_verify_names_every_missing_piece_on_vllm_as_it_ships(versioned_venvs, version, tmp_path):
    pristine = runtime_env.venv_python(versioned_venvs(version)["pristine"])
    done, wall = run_verify([TOOL, "verify", "--python", pristine], tmp_path)
    print(f"\n$ dflash2-backport verify --python <pristine {version}>  ({wall:.1f} s)\n{done.stdout}")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = check_lines(done.stdout)
    assert list(lines) == CHECKS
    for name, needles in MISSING.items():
        state, detail = lines[name]
        assert state == "FAIL"
        for needle in needles:
            assert needle in detail, (name, detail)
    assert done.stdout.splitlines()[-1].startswith("failed: 6 of 6 checks")
    assert "Traceback" not in done.stdout + done.stderr


def test_verify_passes_after_apply_within_a_minute(versioned_venvs, version, tmp_path):
    patched = runtime_env.venv_python(versioned_venvs(version)["patched"])
    done, wall = run_verify([TOOL, "verify", "--python", patched], tmp_path)
    print(f"\n$ dflash2-backport verify --python <patched {version}>  ({wall:.1f} s)\n{done.stdout}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(f"vLLM {version} at ")
    lines = check_lines(done.stdout)
    assert lines == {name: ("pass", lines[name][1]) for name in CHECKS}
    assert done.stdout.splitlines()[-1].startswith("verified: 6 of 6 checks pass")
    assert wall < WALL_LIMIT


def test_verify_json_from_the_vllm_venvs_own_console_script(versioned_venvs, version, tmp_path):
    """No --python: the interpreter running the tool is the one verified."""
    venv = versioned_venvs(version)["patched"]
    done, _ = run_verify([venv / "bin" / "dflash2-backport", "verify", "--json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["passed"] is True
    assert document["vllm_version"] == version
    assert Path(document["vllm_package"]).resolve() == (
        runtime_env.site_packages(venv.resolve()) / "vllm"
    )
    assert [c["name"] for c in document["checks"] if c["ok"]] == CHECKS


def test_verify_leaves_nothing_in_the_temporary_directory(versioned_venvs, tmp_path):
    patched = runtime_env.venv_python(versioned_venvs("0.27.1")["patched"])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, _ = run_verify([TOOL, "verify", "--python", patched], scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(scratch.iterdir()) == []
