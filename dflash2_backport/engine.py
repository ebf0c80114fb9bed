"""Judge every edit and module, and compute what a command would write.

The plan is a value: every file's verdicts, and (when the caller will write
or diff) every change in commit order, each rewrite judged again as written
(see judge.py), with vLLM's RECORD already reconciled. Nothing here writes;
`commit.commit` does, all or nothing; diff.py shows it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import record
from .commit import Change
from .installer import ModulePlan, plan_module_removal, plan_modules
from .judge import JudgedFile, judge
from .layout import commit_rank
from .owned import Owned
from .safe_files import Tree, read_regular
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


def make_plan(
    root: Path,
    need_changes: bool,
    use_cache: bool = True,
    direction: Direction = Direction.APPLY,
    record_file: Path | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """Judge every hunk and module. `need_changes`: the caller will write or
    diff, so the changes are computed (and checked as written) too."""
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


def _files_after(plan: Plan, files: list[JudgedFile]) -> dict[str, bytes | None]:
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
    files: list[JudgedFile],
    record_before: bytes | None,
    record_after: bytes | None,
) -> tuple[Change, ...]:
    changes = []
    for file in files:
        if file.patched is not None and file.patched != file.original:
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


def _refuse_what_is_not_a_plain_file(root: Path, record_file: Path | None) -> None:
    """Links, FIFOs and devices are refused before anything reads them."""
    with Tree(root) as tree:
        Owned(str(record_file.relative_to(root)) if record_file else None).check(tree)
