"""What the commands print: one line per edit and module, then a summary line.

With --json, one object instead: the target, vLLM's version, the action
taken, and per edit its state, file and reason. Every way a run ends goes
through one of the outcome methods, which print and return the exit code,
so an error under --json is still one valid JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import TYPE_CHECKING

from . import __version__
from .verdicts import Direction, State

if TYPE_CHECKING:
    from .engine import Plan
    from .errors import Interrupted
    from .target import Target

_NAME_WIDTH = 20


# How an item's state reads once the command has written it, per direction:
# (edit or record, module).
_DONE = {Direction.APPLY: ("patched", "installed"), Direction.REVERT: ("reverted", "removed")}
# How it reads in a revert, where "applied" means there is something to undo.
_REVERT_WORDS = {
    (State.APPLIED, False): "present",
    (State.PENDING, False): "original",
    (State.APPLIED, True): "present",
    (State.PENDING, True): "absent",
}


class Report:
    def __init__(self, command: str, as_json: bool) -> None:
        self.command = command
        self.direction = Direction.REVERT if command == "revert" else Direction.APPLY
        self.as_json = as_json
        self.target: Target | None = None
        self.plan: Plan | None = None
        self.diff: str | None = None
        self.written: list[str] = []

    # -- outcomes: each prints and returns the exit code --------------------

    def error(self, message: str) -> int:
        if self.as_json:
            self._json("error", error=message)
        else:
            print(f"dflash2-backport: error: {message}", file=sys.stderr)
        return 2

    def internal_error(self, error: BaseException) -> int:
        if os.environ.get("DFLASH2_BACKPORT_DEBUG"):
            traceback.print_exception(error, file=sys.stderr)
        first_line = (str(error).strip().splitlines() or [""])[0]
        return self.error(
            f"internal error ({type(error).__name__}: {first_line}); a commit under way is "
            "finished by the next apply or revert; please report this bug with the "
            "traceback that DFLASH2_BACKPORT_DEBUG=1 prints"
        )

    def interrupted(self, interruption: Interrupted) -> int:
        self.written = interruption.written
        if self.plan is not None and interruption.after_commit:
            self._emit("interrupted", str(interruption), stream=sys.stderr)
            return 2
        return self.error(str(interruption))

    def waiting(self, message: str) -> None:
        print(f"dflash2-backport: {message}", file=sys.stderr, flush=True)

    def upstream(self) -> int:
        assert self.target is not None
        message = (
            f"{self.target.label} ships DFlash2 itself (upstream since 0.28.0); "
            "nothing to do"
        )
        if self.as_json:
            self._json("upstream-ships", message=message)
        else:
            print(message)
        return 0

    def refused(self) -> int:
        problems = self._count(State.DRIFT)
        would = "was" if self.command != "check" else "would be"
        self._emit(
            "refused",
            f"refused: {problems} problem{'s' if problems != 1 else ''}; nothing {would} written",
        )
        return 2

    def finished(self, fail_if_changed: bool = False) -> int:
        assert self.plan is not None
        plan = self.plan
        edits = sum(plan.edit_to_do(e) for e in plan.edits)
        modules = sum(plan.module_to_do(m) for m in plan.modules)
        if not plan.pending:
            done = (
                "every edit is applied and the modules are installed"
                if self.direction is Direction.APPLY
                else "the edits and modules are not there"
            )
            self._emit("nothing-to-do", f"nothing to do: {done}")
            return 0
        if self.command == "check":
            self._emit(
                "pending",
                f"pending: {edits} edit(s) and {modules} module(s); "
                "run `dflash2-backport apply`",
            )
            return 1
        verb, module_verb = _DONE[self.direction]
        self._emit(
            "applied" if self.direction is Direction.APPLY else "reverted",
            f"{verb} {edits} edit(s) and {module_verb} {modules} module(s) "
            f"in {len(self.written)} file(s)",
        )
        return 1 if fail_if_changed else 0

    # -- rendering ------------------------------------------------------------

    def _count(self, state: State) -> int:
        assert self.plan is not None
        return sum(State(e.state) is state for e in self.plan.edits) + sum(
            m.state is state for m in self.plan.modules
        )

    def _label(self, state: State, to_do: bool, module: bool = False) -> str:
        if state is State.DRIFT:
            return state.value
        if self.written and to_do:
            return _DONE[self.direction][module]
        if self.direction is Direction.REVERT:
            return _REVERT_WORDS[(State.APPLIED if to_do else State.PENDING, module)]
        return (State.PENDING if to_do else State.APPLIED).value

    def _lines(self) -> list[str]:
        assert self.plan is not None and self.target is not None
        plan = self.plan
        lines = [self.target.label]
        for edit in plan.edits:
            state = State(edit.state)
            label = self._label(state, plan.edit_to_do(edit))
            line = f"  {label:<9} {edit.edit:<{_NAME_WIDTH}} {edit.path}"
            lines.append(f"{line}: {edit.reason}" if state is State.DRIFT else line)
        for module in plan.modules:
            label = self._label(module.state, plan.module_to_do(module), module=True)
            line = f"  {label:<9} {'module':<{_NAME_WIDTH}} {module.dest}"
            lines.append(f"{line}: {module.reason}" if module.state is State.DRIFT else line)
        if plan.record_state is not None and plan.record is not None:
            pending = plan.record_state is State.PENDING
            label = "updated" if self.written and pending else (
                "pending" if pending else "current"
            )
            record = plan.record.relative_to(plan.root)
            lines.append(f"  {label:<9} {'record':<{_NAME_WIDTH}} {record}")
        lines.extend(f"  note: {note}" for note in plan.notes)
        return lines

    def _emit(self, action: str, summary: str, stream=None) -> None:
        if self.as_json:
            self._json(action, message=summary)
            return
        if self.diff:
            sys.stdout.write(self.diff)
        print("\n".join(self._lines()))
        print(summary if stream is None else f"dflash2-backport: {summary}", file=stream)

    def _json(self, action: str, **extra: object) -> None:
        target = self.target
        document: dict[str, object] = {
            "tool_version": __version__,
            "command": self.command,
            "action": action,
            "target": str(target.root) if target else None,
            "target_kind": target.kind if target else None,
            "vllm_version": target.version if target else None,
            "edits": [],
            "modules": [],
            "record": None,
            "notes": [],
            "changed_files": self.written,
        }
        if self.plan is not None:
            plan = self.plan
            document["edits"] = [e.to_json() for e in plan.edits]
            document["modules"] = [
                {"file": m.dest, "state": m.state.value, "reason": m.reason}
                for m in plan.modules
            ]
            if plan.record is not None and plan.record_state is not None:
                document["record"] = {
                    "file": str(plan.record.relative_to(plan.root)),
                    "state": plan.record_state.value,
                }
            document["notes"] = list(plan.notes)
        if self.diff is not None:
            document["diff"] = self.diff
        document.update(extra)
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
