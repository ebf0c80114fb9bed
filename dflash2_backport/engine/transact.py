"""A run on a tree that needs the backport: an interrupted commit finished or
dropped, the plan made, and (for `apply` and `revert`) committed under the
tree's lock.

`check` writes nothing, not even a lock file: it only says whether a writer
is at work or was interrupted, and what the plan would do.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..transaction import recovery
from ..transaction.commit import commit
from ..transaction.intent import Intent, intent_path, interrupted_command, interrupted_message
from ..transaction.lock import TreeLock, timeout_from_environment, writer_active
from ..transaction.owned import Owned
from ..utils.errors import Interrupted
from ..utils.safe_files import Tree
from ..vllm_tree.record import record_of
from ..vllm_tree.triage import Target, TargetKind
from . import outcome
from .outcome import Outcome
from .plan import Plan, finishing_plan, make_plan

if TYPE_CHECKING:
    from .run import RunOptions, Watcher


@dataclasses.dataclass(frozen=True)
class _Tree:
    """The target with what every plan of it needs: the RECORD to keep true
    and the files the tool owns there."""

    root: Path
    record_file: Path | None
    owned: Owned

    @classmethod
    def of(cls, target: Target) -> tuple[_Tree, str | None]:
        """The tree, and a note on its RECORD where there is one to make."""
        record_file, note = (
            record_of(target.root) if target.kind is TargetKind.SITE_PACKAGES else (None, None)
        )
        owned = Owned(str(record_file.relative_to(target.root)) if record_file else None)
        return cls(target.root, record_file, owned), note

    def finishing_plan(self, intent: Intent) -> Plan:
        return finishing_plan(self.root, intent, self.owned, self.record_file)


def on_tree(target: Target, options: RunOptions, watcher: Watcher) -> Outcome:
    tree, note = _Tree.of(target)
    notes = tuple(filter(None, (note, _someone_elses_tree(target.root))))
    # Links and special files on the way to what the tool writes are refused
    # before it creates anything, its lock included.
    with Tree(target.root) as opened:
        tree.owned.check(opened)
    if options.command == "check":
        return _check(tree, options, watcher, notes)
    return _write(tree, options, watcher, notes)


def _plan(tree: _Tree, options: RunOptions, watcher: Watcher, notes: tuple[str, ...]) -> Plan:
    plan = make_plan(
        tree.root,
        need_changes=options.wants_diff or options.command != "check",
        edit_set=options.edit_set,
        record_file=tree.record_file,
        notes=notes,
    )
    watcher.plan = plan
    if options.wants_diff:
        from .diff import unified

        watcher.diff = unified(plan, modules_whole=options.diff_modules)
    return plan


def _check(
    tree: _Tree, options: RunOptions, watcher: Watcher, notes: tuple[str, ...]
) -> Outcome:
    if os.path.lexists(intent_path(tree.root)):
        holder = writer_active(tree.root)
        if holder is not None:
            return outcome.failed(
                f"{tree.root}: {holder} is writing this tree now; "
                "run check again once it has finished"
            )
    leftover = recovery.examine(tree.root, tree.owned, tree.finishing_plan)
    if leftover is not None:
        return outcome.failed(
            interrupted_message(tree.root, leftover.intent, options.target_options())
        )
    plan = _plan(tree, options, watcher, notes)
    if plan.refused:
        return outcome.refused(options.command, plan)
    return outcome.finished(
        options.command, plan, [], options=options.target_options(),
        fix_command=options.fix_command,
    )


def _write(
    tree: _Tree, options: RunOptions, watcher: Watcher, notes: tuple[str, ...]
) -> Outcome:
    command = options.command
    # What this run's commit wrote, and what finishing an interrupted one
    # wrote: a signal that arrives after either (as the lock is let go, say)
    # reports both.
    written: list[str] = []
    completed: list[str] = []
    try:
        with TreeLock(tree.root, command) as lock:
            lock.acquire(timeout_from_environment(), watcher.waiting)
            leftover = recovery.examine(tree.root, tree.owned, tree.finishing_plan)
            if leftover is None:
                recovery.sweep(tree.root)
            else:
                recovery.clear(tree.root, leftover)
                interrupted = interrupted_command(leftover.intent)
                finishing = leftover.finishing
                if finishing is None:
                    notes += (f"an interrupted {interrupted} had not replaced any file "
                              "yet; it was dropped",)
                elif finishing.refused:
                    watcher.plan = finishing
                    return outcome.refused(leftover.intent.command, finishing)
                else:
                    completed = commit(tree.root, leftover.intent.command,
                                       finishing.changes, finishing.edit_set.value)
                    if not completed:
                        recovery.forget(tree.root)
                    notes += (f"finished an interrupted {interrupted}: "
                              f"{len(completed)} file(s) completed",)
            plan = _plan(tree, options, watcher, notes)
            if plan.refused:
                return outcome.refused(command, plan)
            if plan.pending:
                written = commit(tree.root, command, plan.changes, options.edit_set.value)
    except Interrupted as interruption:
        if not interruption.written:
            interruption.written = list(dict.fromkeys([*completed, *written]))
        raise
    return outcome.finished(command, plan, written, options.fail_if_changed)


def _someone_elses_tree(root: Path) -> str | None:
    """Root at work on a tree another user owns: said once, because
    whatever that user planted in it is what the tool must not trust."""
    if os.geteuid() != 0:
        return None
    try:
        owner = os.stat(root / "vllm").st_uid
    except OSError:
        return None
    if owner == 0:
        return None
    try:
        import pwd

        name = f" ({pwd.getpwuid(owner).pw_name})"
    except (KeyError, ImportError):
        name = ""
    return (
        f"running as root on a tree owned by uid {owner}{name}: only this tool's own "
        "files are written, each keeping its owner, and nothing found in the tree is "
        "trusted as an instruction"
    )
