"""The project's files as a clean clone has them, and the wheel pip builds
from them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def copy_of_the_project(destination: Path) -> Path:
    """This project's files (tracked and new, not ignored), as a clone has
    them: no build leftovers, which setuptools would pack into the wheel."""
    listed = subprocess.run(
        ["git", "-C", str(REPOSITORY), "ls-files", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    for relative in listed:
        if (REPOSITORY / relative).is_file():
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / relative, destination / relative)
    return destination


def wheel_of(checkout: Path, destination: Path) -> Path:
    """The tool's wheel, built by pip from `checkout`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--wheel-dir", str(destination), str(checkout)],
        check=True, capture_output=True,
    )
    (wheel,) = destination.glob("dflash2_backport-*.whl")
    return wheel
