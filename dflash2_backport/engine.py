"""Judge every edit and module, and compute what a command would write.

The plan is a value: every file's verdicts, and (when the caller will write
or diff) every change in commit order, parse-checked, with vLLM's RECORD
already reconciled. Nothing here writes; `commit.commit` does, all or
nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import stat
from pathlib import Path

from . import record
from .commit import Change
from .errors import BackportError
from .installer import ModulePlan, plan_module_removal, plan_modules
from .judge import FileVerdict, judge
from .layout import MODULE_FILES, TARGET_FILES, commit_rank
from .safe_files import check_path, decode_source, read_regular
from .verdicts import Direction, EditReport, State


@dataclasses.dataclass(frozen=True)
class Plan:
    root: Path
    direction: Direction
    edits: tuple[EditReport, ...]
    modules: tuple[ModulePlan, ...]
    #: An installed vLLM's RECORD, kept true to the files (None: none to keep).
    record: Path | None
    #: PENDING when RECORD does not yet match what the files will be.
    record_state: State | None
    #: What the command writes, in commit order; empty when refused, and
    #: when the caller asked for verdicts only.
    changes: tuple[Change, ...]
    #: Things the user should know that are not edits (a missing RECORD).
    notes: tuple[str, ...] = ()

    @property
    def refused(self) -> bool:
        return any(e.state is State.DRIFT for e in self.edits) or any(
            m.state is State.DRIFT for m in self.modules
        )

    def edit_to_do(self, edit: EditReport) -> bool:
        return edit.has(self.direction.rewrites)

    def module_to_do(self, module: ModulePlan) -> bool:
        return module.state is self.direction.rewrites

    @property
    def pending(self) -> bool:
        """Whether this plan's direction has anything to write."""
        return not self.refused and (
            any(self.edit_to_do(e) for e in self.edits)
            or any(self.module_to_do(m) for m in self.modules)
            or self.record_state is State.PENDING
        )

    def diff(self, modules_whole: bool = False) -> str:
        """The unified diff of every change. The new modules are hundreds of
        lines the user did not write and cannot review against anything, so
        unless `modules_whole`, each is one comment line after the diff,
        which `patch` and `git apply` skip."""
        chunks, summaries = [], []
        for change in self.changes:
            if change.path in MODULE_FILES and not modules_whole:
                data = change.after if change.after is not None else change.before
                lines = len(_lines(change.path, data))
                what = "new file" if change.after is not None else "removed"
                summaries.append(
                    f"# {change.path}: {what}, {lines} lines (--diff-modules shows it)\n"
                )
                continue
            chunks.extend(
                difflib.unified_diff(
                    _lines(change.path, change.before),
                    _lines(change.path, change.after),
                    fromfile=f"a/{change.path}" if change.before is not None else "/dev/null",
                    tofile=f"b/{change.path}" if change.after is not None else "/dev/null",
                )
            )
        return "".join(chunks + summaries)


def _lines(path: str, data: bytes | None) -> list[str]:
    if data is None:
        return []
    return decode_source(path, data).splitlines(keepends=True)


def make_plan(
    root: Path,
    need_changes: bool,
    use_cache: bool = True,
    direction: Direction = Direction.APPLY,
    record_file: Path | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """Judge every hunk and module. `need_changes`: the caller will write or
    diff, so the changes are computed (and parse-checked) too."""
    _refuse_what_is_not_a_plain_file(root, record_file)
    modules = tuple(
        plan_modules(root) if direction is Direction.APPLY else plan_module_removal(root)
    )
    files = judge(root, need_changes, direction, use_cache)
    edits = tuple(edit for file in files for edit in file.edits)
    record_before = read_regular(record_file) if record_file is not None else None
    if record_file is not None and record_before is None:
        record_file = None
    plan = Plan(root, direction, edits, modules, record_file, None, (), notes)
    if plan.refused:
        return plan
    after = _files_after(plan, files)
    record_after = None
    if record_file is not None:
        record_after = record.reconcile(record_file, record_before, after)
    record_state = (
        None if record_file is None
        else State.PENDING if record_after != record_before
        else State.APPLIED
    )
    changes: tuple[Change, ...] = ()
    if need_changes:
        changes = _changes(plan, files, record_before, record_after)
    return dataclasses.replace(plan, record_state=record_state, changes=changes)


def _files_after(plan: Plan, files: list[FileVerdict]) -> dict[str, bytes | None]:
    """Every file the backport owns, as the command leaves it: the bytes the
    verdicts were made from, or their rewrite."""
    after: dict[str, bytes | None] = {
        f.path: f.patched if f.patched is not None else f.original for f in files
    }
    for module in plan.modules:
        after[module.dest] = module.content if plan.module_to_do(module) else module.existing
    return after


def _changes(
    plan: Plan,
    files: list[FileVerdict],
    record_before: bytes | None,
    record_after: bytes | None,
) -> tuple[Change, ...]:
    changes = []
    for file in files:
        if file.patched is None:
            continue
        _check_parses(plan.root / file.path, file.patched)
        if file.patched != file.original:
            changes.append(Change(file.path, file.original, file.patched))
    for module in plan.modules:
        if plan.module_to_do(module):
            changes.append(Change(module.dest, module.existing, module.content))
    revert = plan.direction is Direction.REVERT
    changes.sort(key=lambda change: commit_rank(change.path, revert))
    if plan.record is not None and record_after != record_before:
        relative = str(plan.record.relative_to(plan.root))
        changes.append(Change(relative, record_before, record_after))
    return tuple(changes)


def _check_parses(path: Path, source: bytes) -> None:
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as error:  # a bug in a codemod, never the user's file
        raise BackportError(
            f"{path}: the patched file would not parse ({error.msg}, line {error.lineno}); "
            "nothing was written; please report this"
        ) from None


def _refuse_what_is_not_a_plain_file(root: Path, record_file: Path | None) -> None:
    """Links, FIFOs and devices are refused before anything reads them."""
    check_path(root, "vllm", file_expected=False)
    package = check_path(root, "vllm/__init__.py")
    if package is None:
        raise BackportError(
            f"{root / 'vllm' / '__init__.py'}: missing, so vllm/ is not an installed vLLM "
            "package; reinstall vLLM or point the tool at the directory that holds it"
        )
    for relative in (*TARGET_FILES, *MODULE_FILES):
        check_path(root, relative)
    if record_file is not None:
        info = check_path(root, str(record_file.relative_to(root)))
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise BackportError(
                f"{record_file}: is a directory, expected vLLM's RECORD file; nothing was "
                "written; reinstall vLLM to restore it"
            )
