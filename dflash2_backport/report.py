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


class Report:
    def __init__(self, command: str, as_json: bool) -> None:
        self.command = command
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
        message = (
            f"refused: {problems} problem{'s' if problems != 1 else ''}; "
            f"nothing {'was' if self.command == 'apply' else 'would be'} written"
        )
        self._emit("refused", message)
        return 2

    def finished(self) -> int:
        assert self.plan is not None
        pending_edits = sum(e.state == "pending" for e in self.plan.edits)
        pending_modules = sum(m.state == "pending" for m in self.plan.modules)
        if not self.plan.pending:
            self._emit("nothing-to-do", "nothing to do: every edit is applied and the modules are installed")
            return 0
        if self.command == "check":
            self._emit(
                "pending",
                f"pending: {pending_edits} edit(s) and {pending_modules} module(s); "
                "run `dflash2-backport apply`",
            )
            return 1
        self._emit(
            "applied",
            f"applied {pending_edits} edit(s) and installed {pending_modules} module(s) "
            f"in {len(self.written)} file(s)",
        )
        return 0

    # -- rendering ------------------------------------------------------------

    def _count(self, state: str) -> int:
        assert self.plan is not None
        return sum(e.state == state for e in self.plan.edits) + sum(
            m.state == state for m in self.plan.modules
        )

    def _shown(self, state: str) -> str:
        # After a successful apply, what was pending is now done.
        if self.command == "apply" and self.written and state == "pending":
            return "patched"
        return state

    def _emit(self, action: str, summary: str) -> None:
        if self.as_json:
            self._json(action, message=summary)
            return
        assert self.plan is not None and self.target is not None
        out = sys.stdout
        if self.diff:
            out.write(self.diff)
        print(self.target.label, file=out)
        for edit in self.plan.edits:
            line = f"  {self._shown(edit.state):<8} {edit.edit:<{_NAME_WIDTH}} {edit.path}"
            print(f"{line}: {edit.reason}" if edit.state == "drift" else line, file=out)
        for module in self.plan.modules:
            state = self._shown(module.state)
            if state == "patched":
                state = "installed"
            line = f"  {state:<8} {'module':<{_NAME_WIDTH}} {module.dest}"
            print(f"{line}: {module.reason}" if module.state == "drift" else line, file=out)
        print(summary, file=out)

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
            "changed_files": self.written,
        }
        if self.plan is not None:
            document["edits"] = [e.to_json() for e in self.plan.edits]
            document["modules"] = [
                {"file": m.dest, "state": m.state, "reason": m.reason}
                for m in self.plan.modules
            ]
        if self.diff is not None:
            document["diff"] = self.diff
        document.update(extra)
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
