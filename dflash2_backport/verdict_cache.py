"""Remembered verdicts, so that `check` on an unchanged tree skips the parser.

A pre-commit hook runs `check` on every commit, and the seven files rarely
change between two commits. An entry records the content hash of every file
the codemods judged and their verdicts; it is used only when every hash still
matches and the codemods' own source is the same, so a stale answer cannot be
returned. A cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path

from . import __version__
from .verdicts import EditReport


def _directory() -> Path:
    configured = os.environ.get("DFLASH2_BACKPORT_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dflash2-backport" / "verdicts"


@functools.cache
def _codemods_digest() -> str:
    # The transforms package's location, found without importing it (which
    # would load libcst).
    spec = importlib.util.find_spec("dflash2_backport.transforms")
    digest = hashlib.sha256(__version__.encode())
    assert spec is not None and spec.submodule_search_locations
    for path in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _entry(root: Path) -> Path:
    key = hashlib.sha256(f"{root}\0{_codemods_digest()}".encode()).hexdigest()
    return _directory() / f"{key[:32]}.json"


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lookup(root: Path) -> list[EditReport] | None:
    try:
        entry = json.loads(_entry(root).read_text())
        for relative, digest in entry["files"].items():
            if _hash((root / relative).read_bytes()) != digest:
                return None
        return [EditReport.from_json(e) for e in entry["edits"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(root: Path, files: dict[str, bytes], edits: list[EditReport]) -> None:
    entry = {
        "files": {relative: _hash(data) for relative, data in files.items()},
        "edits": [e.to_json() for e in edits],
    }
    path = _entry(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(descriptor, "w") as handle:
            json.dump(entry, handle)
        os.replace(temporary, path)
    except OSError:
        pass
