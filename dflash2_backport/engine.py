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

from .errors import BackportError
from . import record
from .installer import ModulePlan, plan_module_removal, plan_modules
from .judge import judge
from .verdicts import Direction, EditReport


@dataclasses.dataclass
class Plan:
    root: Path
    direction: str  # "apply" or "revert"
    edits: list[EditReport]
    modules: list[ModulePlan]
    # Files the edits change: relative path -> (bytes now, bytes after).
    patched: dict[str, tuple[bytes, bytes]]
    # An installed vLLM's RECORD, kept true to the files (None in a source tree).
    record: Path | None = None

    @property
    def refused(self) -> bool:
        return any(e.state == "drift" for e in self.edits) or any(
            m.state == "drift" for m in self.modules
        )

    def to_do(self, state: str) -> bool:
        """Whether an item in `state` needs writing in this plan's direction."""
        return state == _rewritten(self.direction)

    def edit_to_do(self, edit: EditReport) -> bool:
        return _has(edit, _rewritten(self.direction))

    @property
    def record_state(self) -> str | None:
        if self.record is None:
            return None
        return "pending" if self.record_change is not None else "applied"

    @property
    def pending(self) -> bool:
        """Whether this plan's direction has anything to write."""
        return not self.refused and (
            any(self.edit_to_do(e) for e in self.edits)
            or any(self.to_do(m.state) for m in self.modules)
            or self.record_state == "pending"
        )

    @functools.cached_property
    def changes(self) -> dict[str, tuple[bytes | None, bytes | None]]:
        """Relative path -> (bytes now or None, bytes to write or None to remove)."""
        if self.refused:
            return {}
        changes: dict[str, tuple[bytes | None, bytes | None]] = {}
        for relative, (original, result) in self.patched.items():
            _check_parses(self.root / relative, result)
            if result != original:
                changes[relative] = (original, result)
        for module in self.modules:
            if self.to_do(module.state):
                existing = self.root / module.dest
                before = existing.read_bytes() if existing.is_file() else None
                changes[module.dest] = (before, module.content)
        if self.record_change is not None:
            changes[str(self.record.relative_to(self.root))] = self.record_change
        return changes

    @functools.cached_property
    def record_change(self) -> tuple[bytes, bytes] | None:
        if self.record is None or self.refused:
            return None
        after: dict[str, bytes | None] = {}
        for relative in dict.fromkeys(e.path for e in self.edits):
            after[relative] = (
                self.patched[relative][1]
                if relative in self.patched
                else _read_or_none(self.root / relative)
            )
        for module in self.modules:
            if self.to_do(module.state):
                after[module.dest] = module.content
            else:
                after[module.dest] = _read_or_none(self.root / module.dest)
        before = self.record.read_bytes()
        reconciled = record.reconcile(before, after)
        return None if reconciled == before else (before, reconciled)

    def diff(self) -> str:
        chunks = []
        for path, (old, new) in self.changes.items():
            chunks.extend(
                difflib.unified_diff(
                    _lines(old),
                    _lines(new),
                    fromfile=f"a/{path}" if old is not None else "/dev/null",
                    tofile=f"b/{path}" if new is not None else "/dev/null",
                )
            )
        return "".join(chunks)


def _lines(data: bytes | None) -> list[str]:
    return [] if data is None else data.decode("utf-8").splitlines(keepends=True)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def make_plan(
    root: Path,
    need_changes: bool,
    use_cache: bool = True,
    direction: str = "apply",
    record_file: Path | None = None,
) -> Plan:
    """Judge every hunk and module. `need_changes`: the caller will write or
    diff, so files to rewrite must be rewritten even when the verdicts are
    known."""
    modules = plan_modules(root) if direction == "apply" else plan_module_removal(root)
    files = judge(root, need_changes, Direction(direction), use_cache)
    edits = [edit for file in files for edit in file.edits]
    patched = {f.path: (f.original, f.patched) for f in files if f.patched is not None}
    return Plan(root, direction, edits, modules, patched, record_file)


def _rewritten(direction: str) -> str:
    """The state a direction rewrites: apply patches pending hunks, revert
    undoes applied ones."""
    return "pending" if direction == "apply" else "applied"


def _has(edit: EditReport, state: str) -> bool:
    return any(h.state.value == state for h in edit.hunks)


def _check_parses(path: Path, source: bytes) -> None:
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as error:  # a bug in a codemod, never the user's file
        raise BackportError(
            f"{path}: the patched file would not parse ({error.msg}, line {error.lineno}); "
            "nothing was written; please report this"
        ) from None


def write(plan: Plan) -> list[str]:
    """Write (or remove) every planned file, or none of them."""
    _check_writable(plan)
    # New files take the permissions of vLLM's own package file.
    new_file_mode = os.stat(plan.root / "vllm" / "__init__.py").st_mode & 0o777
    created: list[Path] = []
    done: list[tuple[Path, bytes | None, int]] = []
    try:
        for relative, (old, new) in plan.changes.items():
            path = plan.root / relative
            mode = os.stat(path).st_mode & 0o777 if old is not None else new_file_mode
            if new is None:
                path.unlink()
            else:
                created.extend(_make_parents(path.parent))
                _atomic_write(path, new, mode)
            done.append((path, old, mode))
    except OSError as error:
        for path, old, mode in reversed(done):
            if old is None:
                path.unlink(missing_ok=True)
            else:
                _atomic_write(path, old, mode)
        for directory in reversed(created):
            directory.rmdir()
        raise BackportError(
            f"{error.filename or plan.root}: write failed ({error.strerror}); "
            "every file was restored"
        ) from None
    for path, _, _ in done:
        if not path.exists():
            _remove_leftovers(path)
    return list(plan.changes)


def _remove_leftovers(removed: Path) -> None:
    """Bytecode of a removed module, and its package directory once empty."""
    cache = removed.parent / "__pycache__"
    for compiled in cache.glob(f"{removed.stem}.*.pyc"):
        compiled.unlink(missing_ok=True)
    for directory in (cache, removed.parent):
        try:
            directory.rmdir()
        except OSError:
            pass  # not empty, or already gone: someone else's files stay


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
