"""Bytecode that Python runs without reading its source.

`compileall --invalidation-mode unchecked-hash` (reproducible image builds
use it) writes .pyc files that Python trusts as they are: an edit of the
source beside one would not take effect, and `apply` would report edits
that vLLM never runs. The commands refuse that, naming the file, and write
nothing; bytecode Python checks against its source (timestamp, checked-hash)
is no obstacle.
"""

from __future__ import annotations

import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels

REGISTRY = "vllm/model_executor/models/registry.py"
MODES = {
    "timestamp": py_compile.PycInvalidationMode.TIMESTAMP,
    "checked-hash": py_compile.PycInvalidationMode.CHECKED_HASH,
    "unchecked-hash": py_compile.PycInvalidationMode.UNCHECKED_HASH,
}


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dflash2_backport", *args],
                          capture_output=True, text=True)


def _compile(site: Path, mode: str) -> Path:
    source = site / REGISTRY
    return Path(py_compile.compile(str(source), invalidation_mode=MODES[mode], doraise=True))


CASES = [
    # (the bytecode's mode, the command after it, its exit status)
    ("timestamp", "apply", 0),
    ("checked-hash", "apply", 0),
    ("unchecked-hash", "apply", 2),
    ("unchecked-hash", "revert", 2),
]


@pytest.mark.parametrize(("mode", "command", "status"), CASES,
                         ids=[f"{c[1]} beside {c[0]} bytecode" for c in CASES])
def test_bytecode_python_would_run_instead_of_the_edit_is_refused(
    tmp_path: Path, mode: str, command: str, status: int
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    if command == "revert":
        assert _tool("apply", "--site-packages", str(site)).returncode == 0
    pyc = _compile(site, mode)
    before = snapshot(site)
    done = _tool(command, "--site-packages", str(site))
    assert done.returncode == status, done.stderr
    if status == 2:
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"{pyc}: unchecked-hash bytecode" in done.stderr
        assert "nothing was written" in done.stderr
        assert snapshot(site) == before
    else:
        assert "DFlash2DraftModel" in (site / REGISTRY).read_text()
