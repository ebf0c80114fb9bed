"""How a run ended: the action, the exit code and the summary line, as a value.

The run decides the outcome (run.py); the command line's report only renders it. Exit codes: 0
nothing (left) to do, or done; 1 `check` found work pending, or `apply
--fail-if-changed` changed files; 2 anything that stopped the tool.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shlex
import traceback
from typing import TYPE_CHECKING

from ..transforms.framework.vocabulary import Direction, EditReport, EditSet, State

if TYPE_CHECKING:
    from ..engine.plan import Plan
    from ..utils.errors import Interrupted
    from ..vllm_tree.triage import Target


class Action(enum.Enum):
    ERROR = "error"
    UPSTREAM_SHIPS = "upstream-ships"
    REFUSED = "refused"
    NOTHING_TO_DO = "nothing-to-do"
    PENDING = "pending"
    APPLIED = "applied"
    REVERTED = "reverted"
    INTERRUPTED = "interrupted"


@dataclasses.dataclass(frozen=True)
class Outcome:
    action: Action
    exit_code: int
    message: str
    #: Files the run wrote, relative to the target's root.
    written: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        """Said on stderr, as one line (with the report, for an interruption)."""
        return self.action in (Action.ERROR, Action.INTERRUPTED)


def failed(message: str) -> Outcome:
    return Outcome(Action.ERROR, 2, message)


def crashed(error: BaseException) -> Outcome:
    """A bug: one line like any error, the traceback only on request."""
    if os.environ.get("DFLASH2_BACKPORT_DEBUG"):
        traceback.print_exception(error)
    first_line = (str(error).strip().splitlines() or [""])[0]
    return failed(
        f"internal error ({type(error).__name__}: {first_line}); a commit under way is "
        "finished by the next apply or revert; please report this bug with the "
        "traceback that DFLASH2_BACKPORT_DEBUG=1 prints"
    )


def interrupted(interruption: Interrupted) -> Outcome:
    return Outcome(Action.INTERRUPTED, 2, str(interruption), tuple(interruption.written))


def upstream_ships(target: Target) -> Outcome:
    return Outcome(
        Action.UPSTREAM_SHIPS,
        0,
        f"{target.label} ships DFlash2 itself (upstream since 0.28.0); nothing to do",
    )


def refused(command: str, plan: Plan) -> Outcome:
    problems = sum(e.state is State.DRIFT for e in plan.edits) + sum(
        m.state is State.DRIFT for m in plan.modules
    )
    would = "would be" if command == "check" else "was"
    return Outcome(
        Action.REFUSED,
        2,
        f"refused: {problems} problem{'s' if problems != 1 else ''}; nothing {would} written",
    )


def _count(number: int, thing: str, things: str | None = None) -> str:
    return f"{number} {thing if number == 1 else things or thing + 's'}"


def _joined(*parts: tuple[int, str]) -> str:
    """The parts whose number is not zero, joined with "and"."""
    return " and ".join(text for number, text in parts if number)


def _edits(reports: list[EditReport], *kind: str) -> str:
    """"3 edits in 2 files" (or, with `kind`, "5 upstream fixes in 3 files"):
    edits by name (one may span two files)."""
    names = _count(len({e.edit for e in reports}), *(kind or ("edit",)))
    return f"{names} in {_count(len({e.path for e in reports}), 'file')}"


def _fixes(reports: list[EditReport]) -> str:
    return _edits(reports, *_FIX)


_FIX = ("upstream fix", "upstream fixes")


def _done(plan: Plan) -> str:
    """What a tree that needs nothing holds, in the plan's edit set."""
    if plan.edit_set is EditSet.NONE:
        return "no edit is applied and no new file is installed"
    ours = len({e.edit for e in plan.edits if e.fix is None})
    fixes = len({e.edit for e in plan.edits if e.fix is not None})
    modules = f"the {len(plan.modules)} new files installed"
    if plan.edit_set is EditSet.PR:
        return (
            f"the DFlash2 PR's {ours} edits are applied, none of the {fixes} upstream "
            f"fixes, and {modules}"
        )
    return (
        f"all {ours + fixes} edits are applied (the DFlash2 PR's {ours} and "
        f"{_count(fixes, *_FIX)}) "
        f"and {modules}"
    )


def finished(
    command: str,
    plan: Plan,
    written: list[str],
    fail_if_changed: bool = False,
    options: tuple[str, ...] = (),
    fix_command: str | None = None,
) -> Outcome:
    """`options`: the arguments that named the target, repeated in the hint
    so that it works on the same vLLM. `fix_command`: the command a pending
    `check` names instead of this tool's `apply` (a pre-commit hook's user
    has pre-commit, not this tool, on PATH)."""
    # One way to count everywhere: edits by name (speculator-selection spans
    # two files), files by path, and the two new modules as their three files.
    to_do = [e for e in plan.edits if plan.edit_to_do(e)]
    adding = [e for e in to_do if plan.direction_of(e) is Direction.APPLY]
    undoing = [e for e in to_do if plan.direction_of(e) is Direction.REVERT]
    new_count = sum(plan.module_to_do(m) for m in plan.modules)
    new_files = _count(new_count, "new file")
    applying = plan.direction is Direction.APPLY
    if not plan.pending:
        return Outcome(Action.NOTHING_TO_DO, 0, f"nothing to do: {_done(plan)}")
    # RECORD changes along with the files; it is named when it is all there is.
    record = None
    if not to_do and not new_count and plan.record is not None:
        record = plan.record.relative_to(plan.root)
    if command == "check":
        only_pr = ("--only-pr",) if plan.edit_set is EditSet.PR else ()
        hint = fix_command or shlex.join(["dflash2-backport", "apply", *only_pr, *options])
        held = plan.holds
        # A tree that holds the other edit set is said so: switching sets
        # is an `apply` of the set wanted, nothing more.
        if held is EditSet.PR and plan.edit_set is EditSet.ALL:
            message = (
                "pending: this tree holds the DFlash2 PR's edits alone, as `apply "
                f"--only-pr` leaves it; `{hint}` adds {_fixes(adding)}"
            )
            return Outcome(Action.PENDING, 1, message)
        if held is EditSet.ALL and plan.edit_set is EditSet.PR:
            message = (
                "pending: this tree holds the upstream fixes beside the DFlash2 PR's "
                f"edits, as `apply` leaves it; `{hint}` takes out {_fixes(undoing)}"
            )
            return Outcome(Action.PENDING, 1, message)
        what = (
            f"{record} does not match the files" if record
            else _joined(
                (len(adding), _edits(adding)),
                (len(undoing), f"{_edits(undoing)} to undo"),
                (new_count, new_files),
            )
        )
        return Outcome(Action.PENDING, 1, f"pending: {what}; run `{hint}`")
    if record:
        summary = f"updated {record} to match the files"
    elif applying:
        summary = _joined(
            (len(adding), f"applied {_edits(adding)}"),
            (len(undoing), f"reverted {_edits(undoing)}"),
            (new_count, f"installed {new_files}"),
        )
    else:
        summary = _joined(
            (len(undoing), f"reverted {_edits(undoing)}"), (new_count, f"removed {new_files}")
        )
    return Outcome(
        Action.APPLIED if applying else Action.REVERTED,
        1 if fail_if_changed else 0,
        f"{summary}; {_count(len(written), 'file')} written",
        tuple(written),
    )
