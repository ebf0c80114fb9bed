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
from pathlib import Path

from . import record
from .commit import Change
from .errors import BackportError
from .installer import ModulePlan, plan_module_removal, plan_modules
from .judge import judge
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
        return any(_state(e) is State.DRIFT for e in self.edits) or any(
            m.state is State.DRIFT for m in self.modules
        )

    def edit_to_do(self, edit: EditReport) -> bool:
        rewritten = self.direction.rewrites
        return any(h.state is rewritten for h in edit.hunks)

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


def _state(edit: EditReport) -> State:
    return State(edit.state)


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
    edits, patched = _judged(root, need_changes, direction, use_cache)
    record_before = read_regular(record_file) if record_file is not None else None
    if record_file is not None and record_before is None:
        record_file = None
    plan = Plan(root, direction, edits, modules, record_file, None, (), notes)
    if plan.refused:
        return plan
    after = _files_after(plan, patched)
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
        changes = _changes(plan, patched, after, record_before, record_after)
    return dataclasses.replace(plan, record_state=record_state, changes=changes)


def _judged(
    root: Path, need_changes: bool, direction: Direction, use_cache: bool
) -> tuple[tuple[EditReport, ...], dict[str, tuple[bytes, bytes]]]:
    """Every edit's verdicts, and the rewritten bytes of the files a write needs."""
    files = judge(root, need_changes, direction, use_cache)
    edits = tuple(edit for file in files for edit in file.edits)
    patched = {f.path: (f.original, f.patched) for f in files if f.patched is not None}
    return edits, patched


def _files_after(plan: Plan, patched: dict[str, tuple[bytes, bytes]]) -> dict[str, bytes | None]:
    """Every file the backport owns, as the command leaves it."""
    after: dict[str, bytes | None] = {}
    for relative in dict.fromkeys(e.path for e in plan.edits):
        after[relative] = (
            patched[relative][1] if relative in patched else read_regular(plan.root / relative)
        )
    for module in plan.modules:
        after[module.dest] = (
            module.content if plan.module_to_do(module) else read_regular(plan.root / module.dest)
        )
    return after


def _changes(
    plan: Plan,
    patched: dict[str, tuple[bytes, bytes]],
    after: dict[str, bytes | None],
    record_before: bytes | None,
    record_after: bytes | None,
) -> tuple[Change, ...]:
    changes = []
    for relative, (original, result) in patched.items():
        _check_parses(plan.root / relative, result)
        if result != original:
            changes.append(Change(relative, original, result))
    for module in plan.modules:
        if plan.module_to_do(module):
            before = read_regular(plan.root / module.dest)
            changes.append(Change(module.dest, before, module.content))
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
        if info is not None and not _is_regular(info.st_mode):
            raise BackportError(
                f"{record_file}: is a directory, expected vLLM's RECORD file; nothing was "
                "written; reinstall vLLM to restore it"
            )


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)
