"""Plan every edit in memory, then write all of it or nothing.

Each target file is read and parsed once; the codemods that touch it run in
turn on the same tree. Results are re-parsed before anything is written, and
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
from typing import TYPE_CHECKING

from . import verdict_cache
from .errors import BackportError
from .installer import ModulePlan, plan_modules
from .verdicts import EditReport, State

if TYPE_CHECKING:
    import libcst as cst


@dataclasses.dataclass
class Plan:
    root: Path
    edits: list[EditReport]
    modules: list[ModulePlan]
    # Files some edit would change: relative path -> (bytes now, patched tree).
    trees: dict[str, tuple[bytes, cst.Module]]

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
        for relative, (original, tree) in self.trees.items():
            result = tree.bytes
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


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BackportError(
            f"{path}: missing; this does not look like a vLLM 0.27 tree"
        ) from None
    except IsADirectoryError:
        raise BackportError(f"{path}: is a directory, expected a Python file") from None
    except OSError as error:
        raise BackportError(f"{path}: cannot read ({error.strerror})") from None


def make_plan(root: Path, need_changes: bool, use_cache: bool = True) -> Plan:
    """Judge every hunk and module. `need_changes`: the caller will write or
    diff, so pending files must be parsed even when the verdicts are known."""
    modules = plan_modules(root)
    if use_cache:
        cached = verdict_cache.lookup(root)
        if cached is not None and not (
            need_changes and any(e.state == "pending" for e in cached)
        ):
            return Plan(root, cached, modules, {})
    edits, trees, originals = _run_codemods(root)
    if use_cache:
        verdict_cache.store(root, originals, edits)
    return Plan(root, edits, modules, trees)


def _run_codemods(
    root: Path,
) -> tuple[list[EditReport], dict[str, tuple[bytes, cst.Module]], dict[str, bytes]]:
    # Loaded here, not at start-up: a cached answer never needs the parser.
    import libcst as cst

    from .transforms import CODEMODS, EditRefused

    by_file: dict[str, list] = {}
    for codemod_class in CODEMODS:
        by_file.setdefault(codemod_class.PATH, []).append(codemod_class)

    edits: list[EditReport] = []
    trees: dict[str, tuple[bytes, cst.Module]] = {}
    originals: dict[str, bytes] = {}
    for relative, codemods in by_file.items():
        path = root / relative
        original = originals[relative] = _read(path)
        try:
            tree = cst.parse_module(original)
        except cst.ParserSyntaxError as error:
            raise BackportError(
                f"{path}: does not parse (line {error.raw_line}: {error.message}); "
                "fix the file first"
            ) from None
        changed = False
        for codemod_class in codemods:
            codemod = codemod_class()
            try:
                tree = codemod.transform_module(tree)
            except EditRefused:
                pass
            edits.append(
                EditReport(
                    codemod.EDIT, relative, codemod.DESCRIPTION, tuple(codemod.verdicts)
                )
            )
            changed |= any(v.state is State.PENDING for v in codemod.verdicts)
        if changed:
            trees[relative] = (original, tree)
    return edits, trees, originals


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
