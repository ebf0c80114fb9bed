"""Which commit of this tool is installed, where that can be known.

In order: the commit pip recorded for a VCS install (PEP 610's
direct_url.json, `pip install "git+URL@COMMIT"`); the commit the wheel was
built from, which setup.py records in BUILD_COMMIT when it builds from a
git checkout of this repository (`pip install /path/to/clone`, an sdist made
from one); the checkout this module runs from (an editable install). Read
only for `--version`: nothing here runs on the way to a command.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

#: Written into the built package by setup.py: the commit, and " dirty" when
#: tracked files differed from it.
RECORD_NAME = "BUILD_COMMIT"
DISTRIBUTION = "dflash2-backport"
_PACKAGE = Path(__file__).resolve().parent


def git_commit(directory: Path) -> str | None:
    """"COMMIT" or "COMMIT dirty" for a git checkout of this repository at
    `directory` (its top, holding this package tracked); else None."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != Path(directory).resolve():
            return None
        git("ls-files", "--error-unmatch", "dflash2_backport/build_info.py")
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head} dirty" if changed else head


def vcs_commit(direct_url: str | None) -> str | None:
    """The commit a PEP 610 direct_url.json records for a VCS install."""
    try:
        document = json.loads(direct_url or "")
    except ValueError:
        return None
    vcs = document.get("vcs_info") if isinstance(document, dict) else None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return commit if isinstance(commit, str) and commit else None


def _installed_vcs_commit() -> str | None:
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    # Only the distribution whose files these are: not one installed beside
    # a checkout that runs from its sources.
    here = Path(str(dist.locate_file("dflash2_backport/build_info.py")))
    if not here.exists() or here.resolve() != Path(__file__).resolve():
        return None
    return vcs_commit(dist.read_text("direct_url.json"))


def commit() -> str | None:
    """"COMMIT" or "COMMIT dirty", or None where nothing says."""
    found = _installed_vcs_commit()
    if found:
        return found
    recorded = _PACKAGE / RECORD_NAME
    if recorded.is_file():
        return recorded.read_text().strip() or None
    return git_commit(_PACKAGE.parent)


def version_line(version: str) -> str:
    found = commit()
    if found is None:
        return f"dflash2-backport {version}"
    head, _, dirty = found.partition(" ")
    changes = ", with uncommitted changes" if dirty else ""
    return f"dflash2-backport {version} (commit {head}{changes})"
