"""Remembered verdicts, per file, so that `check` judges only what changed.

A pre-commit hook runs `check` on every commit, and a commit rarely changes
more than one of the seven files. An entry holds one file's edit reports and
is named by the hash of everything its verdicts depend on: the file's path
and content, the direction each of its edits is judged in (a revert also
asks whether other code reads what it would remove, and `apply --only-pr`
undoes the fixes while it applies the PR's edits), and the source of the
judges that produced them. A changed
file, or changed judges, cannot find a stale entry; other trees with the same
file share it. A cache that cannot be read or written is simply not used.
Nothing here parses: a cached answer is reported without reading a tree.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from .. import __version__
from ..edits.verdicts import EditReport


def _directory() -> Path:
    # DFLASH2_BACKPORT_CACHE_DIR: the earlier name, still honoured.
    configured = os.environ.get("DFLASH2_BACKPORT_VERDICT_CACHE") or os.environ.get(
        "DFLASH2_BACKPORT_CACHE_DIR"
    )
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dflash2-backport" / "verdicts"


@functools.cache
def judges_digest(judges: Path) -> str:
    """The tool's version and the source of the judges (the modules of the
    package at `judges`; its writers decide no verdict) and of the module
    that runs them."""
    digest = hashlib.sha256(__version__.encode())
    for path in [*sorted(judges.glob("*.py")), Path(__file__).with_name("judge.py")]:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _entry(judges: str, directions: str, path: str, data: bytes) -> Path:
    key = hashlib.sha256(
        b"\0".join([judges.encode(), directions.encode(), path.encode(), data])
    ).hexdigest()
    return _directory() / key[:2] / f"{key[2:34]}.json"


def lookup(judges: str, directions: str, path: str, data: bytes) -> list[EditReport] | None:
    """The file's edit reports, if these judges judged this content before
    with its edits in these directions (`transforms.directions`)."""
    try:
        entry = json.loads(_entry(judges, directions, path, data).read_text())
        return [EditReport.from_json(e) for e in entry["edits"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(
    judges: str,
    directions: str,
    path: str,
    data: bytes,
    edits: list[EditReport],
) -> None:
    entry = _entry(judges, directions, path, data)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"edits": [e.to_json() for e in edits]}, handle)
        os.replace(temporary, entry)
    except OSError:
        pass
