"""A vLLM on a file system mounted read-only (a container's read-only root, a
read-only bind mount): no permission would let the tool write there, so the
commands that would write say so, and where the edits belong, and write
nothing; those with nothing to write answer as anywhere else.

Needs a real read-only mount: run as root with the right to mount, or skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dflash2_backport", *args],
                          capture_output=True, text=True)


def _mount_read_only(source: Path, mountpoint: Path) -> None:
    mountpoint.mkdir()
    steps = (["mount", "--bind", str(source), str(mountpoint)],
             ["mount", "-o", "remount,bind,ro", str(mountpoint)])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", str(mountpoint)], capture_output=True)
            pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A pristine 0.27.1 site-packages and one the tool patched."""
    base = tmp_path_factory.mktemp("read-only")
    pristine = make_site("0.27.1", base / "pristine")
    applied = make_site("0.27.1", base / "applied")
    done = _tool("apply", "--site-packages", str(applied))
    assert done.returncode == 0, done.stderr
    return {"pristine": pristine, "applied": applied}


CASES = [
    # (tree, command, exit status, what stderr says, what stdout says)
    ("pristine", "apply", 2, "mounted read-only; nothing was written", ""),
    ("applied", "revert", 2, "mounted read-only; nothing was written", ""),
    ("applied", "apply", 0, "", "nothing to do"),
    ("pristine", "revert", 0, "", "nothing to do"),
    ("pristine", "check", 1, "", "pending: 23 edits"),
    ("applied", "check", 0, "", "nothing to do"),
]


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0,
                    reason="mounting needs root on Linux")
@pytest.mark.parametrize(("tree", "command", "status", "says", "reports"), CASES,
                         ids=[f"{c[1]} on the {c[0]} tree" for c in CASES])
def test_a_read_only_mount_is_named_as_such_and_nothing_is_written(
    sites: dict[str, Path], tmp_path: Path,
    tree: str, command: str, status: int, says: str, reports: str,
) -> None:
    mountpoint = tmp_path / "mnt"
    _mount_read_only(sites[tree], mountpoint)
    try:
        before = snapshot(mountpoint)
        result = _tool(command, "--site-packages", str(mountpoint))
        after = snapshot(mountpoint)
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
    assert result.returncode == status, result.stderr
    assert says in result.stderr
    assert reports in result.stdout
    if status == 2:
        # One line, naming the place and where to run the command instead.
        assert result.stderr.count("\n") == 1, result.stderr
        assert str(mountpoint) in result.stderr and "image's build" in result.stderr
    assert after == before
