"""Judge every edit and module, and compute what a command would write.

The plan is a value: every file's verdicts, and (when the caller will write
or diff) every change in commit order, each rewrite judged again as written
(see judge.py), with vLLM's RECORD already reconciled. Nothing here writes;
`commit.commit` does, all or nothing; diff.py shows it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..transforms.framework.vocabulary import Direction, EditReport, EditSet, State
from ..transaction.commit import Change
from ..transaction.intent import Intent, digest, read_intent
from ..transaction.owned import Owned
from ..utils.safe_files import Tree, read_regular
from ..vllm_tree import record
from ..vllm_tree.installer import (
    ModulePlan,
    plan_module_removal,
    plan_modules,
    shipped_content,
)
from ..vllm_tree.layout import commit_rank
from .judge import JudgedFile, judge


@dataclasses.dataclass(frozen=True)
class Plan:
    root: Path
    #: The edits the command leaves in the tree (see `EditSet`).
    edit_set: EditSet
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
    def direction(self) -> Direction:
        """The command's direction: the new modules' and the commit's."""
        return self.edit_set.direction

    @property
    def refused(self) -> bool:
        return any(e.state is State.DRIFT for e in self.edits) or any(
            m.state is State.DRIFT for m in self.modules
        )

    def direction_of(self, edit: EditReport) -> Direction:
        return self.edit_set.of(edit)

    def edit_to_do(self, edit: EditReport) -> bool:
        return edit.has(self.direction_of(edit).rewrites)

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

    @property
    def holds(self) -> EditSet | None:
        """The edit set the tree holds now, modules included; None for a
        tree with some other mix (one being patched by hand, say)."""
        if self.refused:
            return None
        installed = {m.state for m in self.modules}
        for edit_set in EditSet:
            modules = State.PENDING if edit_set is EditSet.NONE else State.APPLIED
            if installed <= {modules} and all(
                {h.state for h in e.hunks} == {edit_set.of(e).leaves} for e in self.edits
            ):
                return edit_set
        return None


def make_plan(
    root: Path,
    need_changes: bool,
    use_cache: bool = True,
    edit_set: EditSet = EditSet.ALL,
    record_file: Path | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """Judge every hunk and module, each edit in the direction `edit_set`
    asks of it. `need_changes`: the caller will write or diff, so the
    changes are computed (and checked as written) too."""
    _refuse_what_is_not_a_plain_file(root, record_file)
    modules = tuple(
        plan_modules(root) if edit_set.direction is Direction.APPLY
        else plan_module_removal(root)
    )
    files = judge(root, need_changes, edit_set, use_cache)
    edits = tuple(edit for file in files for edit in file.edits)
    record_before = read_regular(record_file) if record_file is not None else None
    if record_file is not None and record_before is None:
        record_file = None
    plan = Plan(root, edit_set, edits, modules, record_file, None, (), notes)
    if plan.refused:
        return plan
    record_after = None
    if record_file is not None:
        record_after = record.reconcile(record_file, record_before, _rows(plan, files))
    record_state = (
        None if record_file is None
        else State.PENDING if record_after != record_before
        else State.APPLIED
    )
    changes: tuple[Change, ...] = ()
    if need_changes:
        changes = _changes(plan, files, record_before, record_after)
    return dataclasses.replace(plan, record_state=record_state, changes=changes)


def _rows(plan: Plan, files: list[JudgedFile]) -> record.Rows:
    """What RECORD must say once the command has run: of vLLM's files the
    edits touch, their content; of the modules, those of the tool's that
    stand in place and those that do not. A file at a module's path that is
    not the tool's (kept, upstream's, someone else's) is left out: its row,
    or its lack of one, is not the tool's to change, but for the row the tool
    wrote for a module the user has since marked to be kept."""
    edited = {f.path: f.patched if f.patched is not None else f.original for f in files}
    installed: dict[str, bytes] = {}
    removed: dict[str, bytes | None] = {}
    for module in plan.modules:
        if module.kept:
            # The user's now: a row the tool wrote when it installed the file
            # goes, or `pip uninstall vllm` would delete it; any other row is
            # not the tool's.
            removed[module.dest] = shipped_content(module.dest)
            continue
        to_do = plan.module_to_do(module)
        if plan.direction is Direction.APPLY:
            # Written now, or the tool's own already (a file that is not
            # stops the plan as drift).
            installed[module.dest] = module.content
        elif to_do:
            removed[module.dest] = None  # the command removes the tool's file
        elif module.existing is None:
            removed[module.dest] = shipped_content(module.dest)
    return record.Rows(edited, installed, removed)


def _changes(
    plan: Plan,
    files: list[JudgedFile],
    record_before: bytes | None,
    record_after: bytes | None,
) -> tuple[Change, ...]:
    changes = []
    # A file that undoes any of its edits is written the way a revert
    # writes (switches before seams before modules), and before every file
    # that only adds: so `apply --only-pr` takes the fixes' callers out
    # before what they call, and every prefix of any commit is a vLLM that
    # works.
    undoing: set[str] = set()
    for file in files:
        if file.patched is not None and file.patched != file.original:
            changes.append(Change(file.path, file.original, file.patched))
            if any(
                plan.direction_of(e) is Direction.REVERT and plan.edit_to_do(e)
                for e in file.edits
            ):
                undoing.add(file.path)
    for module in plan.modules:
        if plan.module_to_do(module):
            changes.append(Change(module.dest, module.existing, module.content))
            if plan.direction is Direction.REVERT:
                undoing.add(module.dest)
    changes.sort(
        key=lambda change: (
            change.path not in undoing,
            commit_rank(change.path, revert=change.path in undoing),
        )
    )
    if plan.record is not None and record_after != record_before:
        relative = str(plan.record.relative_to(plan.root))
        changes.append(Change(relative, record_before, record_after))
    return tuple(changes)


def finishing_plan(
    root: Path, intent: Intent, owned: Owned, record_file: Path | None
) -> Plan:
    """The plan that finishes an interrupted commit (recovery.py checks it
    against the commit's record). The record names the edit set; one of an
    earlier version names only the command, apply or revert: of the plans
    an apply could have made, the one that writes what the record says it
    was writing is the one that finishes it."""
    if intent.edit_set is not None:
        sets: tuple[EditSet, ...] = (EditSet(intent.edit_set),)
    elif intent.command == "revert":
        sets = (EditSet.NONE,)
    else:
        sets = (EditSet.ALL, EditSet.PR)
    first = None
    for edit_set in sets:
        plan = make_plan(root, need_changes=True, edit_set=edit_set, record_file=record_file)
        if _finishes(plan, owned):
            return plan
        first = first or plan
    assert first is not None
    return first


def _finishes(plan: Plan, owned: Owned) -> bool:
    with Tree(plan.root) as tree:
        intent = read_intent(tree, owned)
        if intent is None or plan.refused:
            return False
        now = {step.path: digest(tree.read(step.path)) for step in intent.steps}
    planned = {change.path: digest(change.after) for change in plan.changes}
    return all(planned.get(step.path, now[step.path]) == step.after for step in intent.steps)


def _refuse_what_is_not_a_plain_file(root: Path, record_file: Path | None) -> None:
    """Links, FIFOs and devices are refused before anything reads them."""
    with Tree(root) as tree:
        Owned(str(record_file.relative_to(root)) if record_file else None).check(tree)
