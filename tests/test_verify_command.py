"""`verify` when the probes cannot even start: one line, exit 2, no traceback.

Real vLLM (failing and passing) is in tests/runtime/test_runtime_verify.py;
here a stand-in `vllm` package breaks on import, quickly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_interpreter import bare_venv, tool

BROKEN = "raise RuntimeError('this vllm is broken on purpose')\n"


@pytest.fixture
def broken_vllm(tmp_path: Path) -> Path:
    python, site = bare_venv(tmp_path / "venv")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text(BROKEN)
    return python


def test_probes_that_crash_give_one_line_naming_the_error(broken_vllm: Path) -> None:
    result = tool("verify", "--python", broken_vllm)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {broken_vllm}: the probes crashed")
    assert "RuntimeError: this vllm is broken on purpose" in line


def test_probes_that_crash_give_json_with_the_error(broken_vllm: Path) -> None:
    result = tool("verify", "--python", broken_vllm, "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert "this vllm is broken on purpose" in document["error"]
