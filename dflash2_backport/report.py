"""What the commands print: one line per edit and module, then a summary line.

With --json, one object instead: the target, vLLM's version, the action
taken, and per edit its state, file and reason.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    from .engine import Plan
    from .target import Target

_NAME_WIDTH = 20

# How an item's state reads once the command has written it, per direction:
# (edit or record, module) labels for the state that was rewritten.
_DONE = {"apply": ("patched", "installed"), "revert": ("reverted", "removed")}


class Report:
    def __init__(self, command: str, as_json: bool) -> None:
        self.command = command
        self.direction = "revert" if command == "revert" else "apply"
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
        problems = self._count("drift")
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
        modules = sum(plan.to_do(m.state) for m in plan.modules)
        if not plan.pending:
            done = (
                "every edit is applied and the modules are installed"
                if self.direction == "apply"
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
            "applied" if self.direction == "apply" else "reverted",
            f"{verb} {edits} edit(s) and {module_verb} {modules} module(s) "
            f"in {len(self.written)} file(s)",
        )
        return 1 if fail_if_changed else 0

    # -- rendering ------------------------------------------------------------

    def _count(self, state: str) -> int:
        assert self.plan is not None
        return sum(e.state == state for e in self.plan.edits) + sum(
            m.state == state for m in self.plan.modules
        )

    def _label(self, state: str, module: bool = False) -> str:
        assert self.plan is not None
        if self.written and self.plan.to_do(state):
            return _DONE[self.direction][module]
        if self.direction == "revert" and state != "drift":
            return {"applied": "present", "pending": "absent" if module else "original"}[state]
        return state

    def _lines(self) -> list[str]:
        assert self.plan is not None and self.target is not None
        lines = [self.target.label]
        for edit in self.plan.edits:
            # An edit reads as "to do" when any of its hunks is, in either direction.
            to_do, done = ("pending", "applied")[:: 1 if self.direction == "apply" else -1]
            state = edit.state if edit.state == "drift" else (
                to_do if self.plan.edit_to_do(edit) else done
            )
            line = f"  {self._label(state):<9} {edit.edit:<{_NAME_WIDTH}} {edit.path}"
            lines.append(f"{line}: {edit.reason}" if edit.state == "drift" else line)
        for module in self.plan.modules:
            label = self._label(module.state, module=True)
            line = f"  {label:<9} {'module':<{_NAME_WIDTH}} {module.dest}"
            lines.append(f"{line}: {module.reason}" if module.state == "drift" else line)
        state = self.plan.record_state
        if state is not None:
            label = "updated" if self.written and state == "pending" else (
                "pending" if state == "pending" else "current"
            )
            record = self.plan.record.relative_to(self.plan.root)
            lines.append(f"  {label:<9} {'record':<{_NAME_WIDTH}} {record}")
        return lines

    def _emit(self, action: str, summary: str) -> None:
        if self.as_json:
            self._json(action, message=summary)
            return
        if self.diff:
            sys.stdout.write(self.diff)
        print("\n".join([*self._lines(), summary]))

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
            "changed_files": self.written,
        }
        if self.plan is not None:
            document["edits"] = [e.to_json() for e in self.plan.edits]
            document["modules"] = [
                {"file": m.dest, "state": m.state, "reason": m.reason}
                for m in self.plan.modules
            ]
            if self.plan.record is not None:
                document["record"] = {
                    "file": str(self.plan.record.relative_to(self.plan.root)),
                    "state": self.plan.record_state,
                }
        if self.diff is not None:
            document["diff"] = self.diff
        document.update(extra)
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
