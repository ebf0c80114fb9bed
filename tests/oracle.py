"""The spec's own string patcher, run as an oracle: on a pristine 0.27.1 its
output is the intended result of `apply`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = Path(
    os.environ.get(
        "DFLASH2_BACKPORT_SPEC",
        Path(__file__).resolve().parents[2] / "shared" / "spec",
    )
)


def seed_patched(site: Path, scratch: Path) -> Path:
    """A copy of `site` patched by the spec's seed_patch.py."""
    script = SPEC / "seed_patch.py"
    if not script.exists():
        if os.environ.get("CI"):
            pytest.fail(f"the spec's seed_patch.py is missing at {script}")
        pytest.skip(f"the spec's seed_patch.py is not at {script}")
    copy = scratch / "seeded"
    shutil.copytree(site, copy)
    subprocess.run(
        [sys.executable, str(script), str(copy)],
        check=True,
        capture_output=True,
        cwd=SPEC,
    )
    return copy


def closure_patched(site: Path, scratch: Path) -> Path:
    """The spec patcher's result with the upstream fixes the tool carries
    made on top of it by `apply` (on it, only they are pending): what
    `apply` must leave on `site`, the fixes' edits being tested on their own
    (tests/transforms, tests/runtime)."""
    from typer.testing import CliRunner

    from dflash2_backport.cli import app

    seeded = seed_patched(site, scratch)
    result = CliRunner().invoke(app, ["apply", "--site-packages", str(seeded)])
    assert result.exit_code == 0, result.output
    return seeded
