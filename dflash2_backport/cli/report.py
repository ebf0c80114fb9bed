"""What the commands print: one line per edit and module, then a summary line.
An upstream fix's line says so, with upstream's reference and release.

With --json, one object instead: the target, vLLM's version, the action
taken, the edit set the command makes and the one the tree holds, and per
edit its state, file, reason and set (the DFlash2 PR's, or a fix, with its
upstream PR and first release). The report decides nothing:
it renders an `Outcome` with whatever is known of the target and the plan,
so an error under --json is still one valid JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from typing import TYPE_CHECKING

from .. import __version__
from ..transforms.framework.vocabulary import Direction, State
from ..utils.style import paint
from ..engine.outcome import Action, Outcome

if TYPE_CHECKING:
    from ..engine.plan import Plan
    from ..vllm_tree.triage import Target

_NAME_WIDTH = 20

# How an item reads once the command has written it: (edit or record, module).
_DONE = {Direction.APPLY: ("patched", "installed"), Direction.REVERT: ("reverted", "removed")}
# How it reads in a revert, where "to do" means there is something to undo.
_REVERT_WORDS = {(True, False): "present", (False, False): "original",
                 (True, True): "present", (False, True): "absent"}


@dataclasses.dataclass
class Report:
    command: str
    as_json: bool
    target: Target | None = None
    plan: Plan | None = None
    diff: str | None = None
    #: --diff was given: stdout is the diff's alone, the report goes to stderr.
    diff_only_on_stdout: bool = False

    def render(self, outcome: Outcome) -> int:
        """Print `outcome`; return its exit code."""
        # With --diff, stdout carries the diff alone, so that it can be saved
        # and applied as it is (as with `ruff --diff` and `black --diff`).
        out = sys.stderr if self.diff_only_on_stdout else sys.stdout
        if self.as_json:
            self._json(outcome)
        elif outcome.action is Action.ERROR:
            print(f"dflash2-backport: {paint('error', sys.stderr)}: {outcome.message}",
                  file=sys.stderr)
        elif outcome.action is Action.UPSTREAM_SHIPS:
            print(outcome.message, file=out)
        else:
            if self.diff:
                sys.stdout.write(self.diff)
                sys.stdout.flush()
            if self.plan is not None and self.target is not None:
                print("\n".join(self._lines(outcome, out)), file=out)
            if outcome.is_error:
                print(f"dflash2-backport: {outcome.message}", file=sys.stderr)
            else:
                # The summary opens with its state word ("pending: ...").
                first = re.match(r"\w+", outcome.message)
                end = first.end() if first else 0
                print(paint(outcome.message[:end], out) + outcome.message[end:], file=out)
        return outcome.exit_code

    def waiting(self, message: str) -> None:
        print(f"dflash2-backport: {message}", file=sys.stderr, flush=True)

    # -- rendering ------------------------------------------------------------

    def _label(
        self, outcome: Outcome, state: State, to_do: bool, direction: Direction,
        module: bool = False,
    ) -> str:
        if state is State.DRIFT:
            return state.value
        if outcome.written and to_do:
            return _DONE[direction][module]
        if direction is Direction.REVERT:
            return _REVERT_WORDS[(to_do, module)]
        return (State.PENDING if to_do else State.APPLIED).value

    def _lines(self, outcome: Outcome, out) -> list[str]:
        assert self.plan is not None and self.target is not None
        plan = self.plan
        lines = [self.target.label]
        # The DFlash2 PR's edits, then the upstream fixes, each in file order.
        for edit in sorted(plan.edits, key=lambda e: e.fix is not None):
            label = self._label(
                outcome, edit.state, plan.edit_to_do(edit), plan.direction_of(edit)
            )
            line = f"  {paint(label, out, 9)} {edit.edit:<{_NAME_WIDTH}} {edit.path}"
            if edit.fix is not None:
                line += f" ({edit.fix.describe()})"
            lines.append(f"{line}: {edit.reason}" if edit.state is State.DRIFT else line)
        for module in plan.modules:
            label = "kept" if module.kept else self._label(
                outcome, module.state, plan.module_to_do(module), plan.direction, module=True
            )
            line = f"  {paint(label, out, 9)} {'new file':<{_NAME_WIDTH}} {module.dest}"
            shown = module.state is State.DRIFT or module.kept
            lines.append(f"{line}: {module.reason}" if shown else line)
        if plan.record_state is not None and plan.record is not None:
            pending = plan.record_state is State.PENDING
            label = "updated" if outcome.written and pending else (
                "pending" if pending else "current"
            )
            record = plan.record.relative_to(plan.root)
            lines.append(f"  {paint(label, out, 9)} {'record':<{_NAME_WIDTH}} {record}")
        lines.extend(f"  note: {note}" for note in plan.notes)
        return lines

    def _json(self, outcome: Outcome) -> None:
        target = self.target
        document: dict[str, object] = {
            "tool_version": __version__,
            "command": self.command,
            "action": outcome.action.value,
            "target": str(target.root) if target else None,
            "target_kind": str(target.kind) if target else None,
            "vllm_version": target.version if target else None,
            "python": getattr(target, "python", None) if target else None,
            "edit_set": None,
            "holds": None,
            "edits": [],
            "modules": [],
            "record": None,
            "notes": [],
            "changed_files": list(outcome.written),
        }
        if self.plan is not None:
            plan = self.plan
            document["edit_set"] = plan.edit_set.value
            holds = plan.holds
            document["holds"] = holds.value if holds is not None else None
            document["edits"] = [e.to_json() for e in plan.edits]
            document["modules"] = [
                {"file": m.dest, "state": m.state.value, "reason": m.reason, "kept": m.kept}
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
        key = "error" if outcome.action is Action.ERROR else "message"
        document[key] = outcome.message
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
