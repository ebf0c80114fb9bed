"""Real vLLM wheels from PyPI for the tests: downloaded once, cached, never committed.

The cache lives in $DFLASH2_BACKPORT_TEST_CACHE (formerly
$DFLASH2_BACKPORT_CACHE, still honoured), by default the repository's
git-ignored `.cache/dflash2-backport`: wheels, their extracted trees, and the
runtime venvs. Point several checkouts at one directory to share it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
CACHE = Path(
    os.environ.get("DFLASH2_BACKPORT_TEST_CACHE")
    or os.environ.get("DFLASH2_BACKPORT_CACHE")
    or REPOSITORY / ".cache" / "dflash2-backport"
).expanduser()


def vllm_wheel(version: str) -> Path:
    """The vLLM wheel for `version`, downloaded with pip on first use."""
    directory = CACHE / "wheels"
    found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         f"vllm=={version}", "--dest", str(directory)],
        check=True,
    )
    return sorted(directory.glob(f"vllm-{version}-*.whl"))[0]


def vllm_source(version: str) -> Path:
    """A read-only reference copy of the wheel's Python files and metadata.

    Returns the directory that contains `vllm/` and `vllm-X.dist-info/`, as a
    site-packages would. Callers that modify files must copy it first.
    """
    target = CACHE / "trees" / version
    done = target / ".complete"
    if not done.exists():
        with zipfile.ZipFile(vllm_wheel(version)) as wheel:
            members = [
                name for name in wheel.namelist()
                if name.endswith(".py") or ".dist-info/" in name
            ]
            wheel.extractall(target, members)
        done.touch()
    return target
