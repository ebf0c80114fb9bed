"""Plan every edit in memory, then write all of it or nothing.

Each target file is read and parsed once; the codemods that touch it run in
turn on the same tree (see judge.py). Results are re-parsed before anything is written, and
files are replaced atomically (temporary file in the same directory, fsync,
os.replace) with their permissions kept. If a write still fails part-way, the
files already replaced are put back.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import os
import tempfile
from pathlib import Path

from . import verdict_cache
from .errors import BackportError
from .installer import ModulePlan, plan_modules
from .judge import judge
from .verdicts import EditReport


@dataclasses.dataclass
class Plan:
    root: Path
    edits: list[EditReport]
    modules: list[ModulePlan]
    # Files some edit would change: relative path -> (bytes now, patched bytes).
    patched: dict[str, tuple[bytes, bytes]]

    @property
    def refused(self) -> bool:
        return any(e.state == "drift" for e in self.edits) or any(
            m.state == "drift" for m in self.modules
        )

    @property
    def pending(self) -> bool:
        return not self.refused and (
            any(e.state == "pending" for e in self.edits)
            or any(m.state == "pending" for m in self.modules)
        )

    @functools.cached_property
    def changes(self) -> dict[str, tuple[bytes | None, bytes]]:
        """Relative path -> (bytes now, or None for a new file; bytes to write)."""
        if self.refused:
            return {}
        changes: dict[str, tuple[bytes | None, bytes]] = {}
        for relative, (original, result) in self.patched.items():
            _check_parses(self.root / relative, result)
            if result != original:
                changes[relative] = (original, result)
        for module in self.modules:
            if module.state == "pending":
                existing = self.root / module.dest
                before = existing.read_bytes() if existing.exists() else None
                changes[module.dest] = (before, module.content)
        return changes

    def diff(self) -> str:
        chunks = []
        for path, (old, new) in self.changes.items():
            chunks.extend(
                difflib.unified_diff(
                    _lines(old),
                    _lines(new),
                    fromfile=f"a/{path}" if old is not None else "/dev/null",
                    tofile=f"b/{path}",
                )
            )
        return "".join(chunks)


def _lines(data: bytes | None) -> list[str]:
    return [] if data is None else data.decode("utf-8").splitlines(keepends=True)


def make_plan(root: Path, need_changes: bool, use_cache: bool = True) -> Plan:
    """Judge every hunk and module. `need_changes`: the caller will write or
    diff, so pending files must be patched even when the verdicts are known."""
    modules = plan_modules(root)
    if use_cache:
        cached = verdict_cache.lookup(root)
        if cached is not None and not (
            need_changes and any(e.state == "pending" for e in cached)
        ):
            return Plan(root, cached, modules, {})
    files = judge(root, want_bytes=need_changes)
    edits = [edit for file in files for edit in file.edits]
    if use_cache:
        verdict_cache.store(root, {f.path: f.original for f in files}, edits)
    patched = {f.path: (f.original, f.patched) for f in files if f.patched is not None}
    return Plan(root, edits, modules, patched)


def _check_parses(path: Path, source: bytes) -> None:
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as error:  # a bug in a codemod, never the user's file
        raise BackportError(
            f"{path}: the patched file would not parse ({error.msg}, line {error.lineno}); "
            "nothing was written; please report this"
        ) from None


def write(plan: Plan) -> list[str]:
    """Write every planned change, or none of them."""
    _check_writable(plan)
    # New files take the permissions of vLLM's own package file.
    new_file_mode = os.stat(plan.root / "vllm" / "__init__.py").st_mode & 0o777
    created: list[Path] = []
    done: list[tuple[Path, bytes | None]] = []
    try:
        for relative, (old, new) in plan.changes.items():
            path = plan.root / relative
            created.extend(_make_parents(path.parent))
            mode = os.stat(path).st_mode & 0o777 if old is not None else new_file_mode
            _atomic_write(path, new, mode)
            done.append((path, old))
    except OSError as error:
        for path, old in reversed(done):
            if old is None:
                path.unlink(missing_ok=True)
            else:
                _atomic_write(path, old, os.stat(path).st_mode & 0o777)
        for directory in reversed(created):
            directory.rmdir()
        raise BackportError(
            f"{error.filename or plan.root}: write failed ({error.strerror}); "
            "every file was restored"
        ) from None
    return list(plan.changes)


def _make_parents(directory: Path) -> list[Path]:
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir()
    return list(reversed(missing))


def _check_writable(plan: Plan) -> None:
    for relative, (old, _) in plan.changes.items():
        path = plan.root / relative
        directory = _nearest_existing(path.parent)
        if old is not None and not os.access(path, os.W_OK):
            raise BackportError(f"{path}: read-only; nothing was written")
        if not os.access(directory, os.W_OK):
            raise BackportError(f"{directory}: directory is read-only; nothing was written")


def _nearest_existing(directory: Path) -> Path:
    while not directory.exists():
        directory = directory.parent
    return directory


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
