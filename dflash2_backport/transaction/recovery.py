"""Finish or drop the commit a killed run left, trusting nothing it finds.

The intent record lives in `vllm/`, where whoever can write the tree can
forge one, and root may run the tool next. So the record is a claim to
check, not an instruction:

* its paths must be files this tool writes in this tree (`owned.Owned`),
  spelled exactly so, and its shape one this tool writes (`intent.read_intent`);
* every file it names must now hold one of its two contents, before or
  after;
* for a commit that had begun renaming, every "after" must be what this
  tool itself computes for that file: the interrupted command is finished
  by planning it again from the files and committing that plan, so no byte
  and no path is ever taken from the record or from a staged file.

Anything else stops the run with exit 2, naming the record, before anything
is touched. Staged files are removed only at the names derived from the
record's checked paths and its nonce: a name that carries the nonce is the
interrupted run's by construction, so whatever it holds (a kill may have
left it empty or half-written) is removed, and a file at any other name is
never touched. A record of an earlier version of the tool has no nonce; its
staged files are removed only when their content is one the record names.
The record's own staged copy is removed only when it carries its signature.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from ..utils.errors import BackportError
from ..utils.safe_files import Tree
from .commit import Change
from .intent import (
    INTENT,
    Intent,
    Phase,
    digest,
    drop_stale_record_copy,
    read_intent,
    remove_intent,
)
from .staging import remove_bytecode
from .owned import Owned


class Finishing(Protocol):
    """What this module reads of the plan that finishes an interrupted
    command (the engine's `Plan`, which the caller makes)."""

    @property
    def refused(self) -> bool: ...

    @property
    def changes(self) -> Sequence[Change]: ...


PlanT = TypeVar("PlanT", bound=Finishing)


@dataclasses.dataclass(frozen=True)
class Leftover(Generic[PlanT]):
    intent: Intent
    #: For a commit that had begun renaming: the plan that completes it.
    finishing: PlanT | None


def examine(
    root: Path, owned: Owned, plan_for: Callable[[Intent], PlanT]
) -> Leftover[PlanT] | None:
    """The interrupted commit, checked; None when there is none. Reads only."""
    where = root / INTENT
    with Tree(root) as tree:
        intent = read_intent(tree, owned)
        if intent is None:
            return None
        now = {step.path: digest(tree.read(step.path)) for step in intent.steps}
    for step in intent.steps:
        if now[step.path] not in (step.before, step.after):
            raise BackportError(
                f"{where}: {step.path} holds neither the content it had before the "
                f"interrupted {intent.command} nor the one it was to have, so the record "
                "cannot be acted on; nothing was touched; compare the file with vLLM "
                "0.27.1, then remove the record and run the command again"
            )
    if intent.phase is Phase.STAGING:
        return Leftover(intent, None)
    finishing = plan_for(intent)
    if finishing.refused:
        return Leftover(intent, finishing)
    planned = {change.path: digest(change.after) for change in finishing.changes}
    for step in intent.steps:
        if planned.get(step.path, now[step.path]) != step.after:
            written_by = f"dflash2-backport {intent.tool}" if intent.tool else "another version"
            raise BackportError(
                f"{where}: not a record this tool wrote (it claims content for "
                f"{step.path} that this dflash2-backport would not write; if {written_by} "
                "was interrupted here, finish with that version); nothing was touched; "
                "otherwise remove the file, then run the command again"
            )
    return Leftover(intent, finishing)


def clear(root: Path, leftover: Leftover[Finishing]) -> None:
    """Remove what the interrupted run staged, and, when it had renamed
    nothing, its record and the directories it created. A commit that had
    begun renaming keeps its record until the commit that finishes it
    writes its own."""
    intent = leftover.intent
    with Tree(root) as tree:
        for step in intent.steps:
            staged = intent.staged(step.path)
            info = tree.lstat(staged)
            if info is None or not stat.S_ISREG(info.st_mode):
                continue  # nothing staged, or not what the tool makes there
            if intent.nonce is None and (
                info.st_nlink != 1 or digest(tree.read(staged)) not in (step.before, step.after)
            ):
                continue  # at an unmarked name, only a content of the record's is the tool's
            directory, name = tree.parent_of(staged)
            with tree.naming(staged):
                os.unlink(name, dir_fd=directory)
        if intent.phase is Phase.STAGING:
            for relative in reversed(intent.directories):
                parent, name = tree.parent_of(relative)
                if parent is not None:
                    try:
                        os.rmdir(name, dir_fd=parent)
                    except OSError:
                        pass  # not empty: something else lives there now
            remove_intent(tree)
            return
        removed = [s.path for s in intent.steps if s.after is None and tree.lstat(s.path) is None]
        remove_bytecode(tree, removed)


def sweep(root: Path) -> None:
    """With no record: only the record's own staged copy can be the tool's.
    Where this user may not remove it, it is left: such a user writes
    nothing here either, and a run with work to do refuses as it stages."""
    with Tree(root) as tree:
        try:
            drop_stale_record_copy(tree)
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise


def forget(root: Path) -> None:
    """The record of a commit that needed nothing more to finish."""
    with Tree(root) as tree:
        remove_intent(tree)
