"""Real vLLM wheels from PyPI for the tests: downloaded once, cached, never committed.

The cache lives in $DFLASH2_BACKPORT_TEST_CACHE (formerly
$DFLASH2_BACKPORT_CACHE, still honoured), by default the repository's
git-ignored `.cache/dflash2-backport`: wheels, their extracted trees, and the
runtime venvs. Point several checkouts at one directory to share it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
CACHE = Path(
    os.environ.get("DFLASH2_BACKPORT_TEST_CACHE")
    or os.environ.get("DFLASH2_BACKPORT_CACHE")
    or REPOSITORY / ".cache" / "dflash2-backport"
).expanduser()


@contextmanager
def cache_lock(name: str):
    """An exclusive lock on CACHE/.NAME.lock: several pytest processes (the
    suite's workers, other checkouts sharing the cache) fill the cache one
    at a time, and none reads what another is still writing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def vllm_wheel(version: str) -> Path:
    """The vLLM wheel for `version`, downloaded with pip on first use."""
    directory = CACHE / "wheels"
    found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    with cache_lock("wheels"):
        found = sorted(directory.glob(f"vllm-{version}-*.whl"))
        if found:
            return found[0]
        directory.mkdir(parents=True, exist_ok=True)
        # pip writes the wheel in place: download beside it, then move it in,
        # so that the glob above never finds half a wheel.
        partial = directory / f".partial-{version}-{os.getpid()}"
        partial.mkdir()
        try:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 f"vllm=={version}", "--dest", str(partial)],
                check=True,
            )
            (wheel,) = partial.glob(f"vllm-{version}-*.whl")
            wheel.replace(directory / wheel.name)
        finally:
            for leftover in partial.iterdir():
                leftover.unlink()
            partial.rmdir()
    return sorted(directory.glob(f"vllm-{version}-*.whl"))[0]


def vllm_source(version: str) -> Path:
    """A read-only reference copy of the wheel's Python files and metadata.

    Returns the directory that contains `vllm/` and `vllm-X.dist-info/`, as a
    site-packages would. Callers that modify files must copy it first.
    """
    target = CACHE / "trees" / version
    done = target / ".complete"
    if not done.exists():
        wheel_path = vllm_wheel(version)
        with cache_lock("trees"):
            if not done.exists():
                with zipfile.ZipFile(wheel_path) as wheel:
                    members = [
                        name for name in wheel.namelist()
                        if name.endswith(".py") or ".dist-info/" in name
                    ]
                    wheel.extractall(target, members)
                done.touch()
    return target
