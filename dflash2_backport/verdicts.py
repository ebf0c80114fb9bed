"""Hunk verdicts: the vocabulary shared by the codemods, the engine and the report.

Kept free of libcst so that a cached answer can be reported without loading
the parser.
"""

from __future__ import annotations

import dataclasses
import enum


class State(enum.Enum):
    APPLIED = "applied"
    PENDING = "pending"
    DRIFT = "drift"


class Direction(enum.Enum):
    """Which way a command rewrites the tree."""

    APPLY = "apply"
    REVERT = "revert"

    @property
    def rewrites(self) -> State:
        """The hunk state this direction changes: apply patches pending hunks,
        revert undoes applied ones."""
        return State.PENDING if self is Direction.APPLY else State.APPLIED


@dataclasses.dataclass(frozen=True)
class HunkVerdict:
    hunk: str
    state: State
    # For drift: "expected ..., found ..." in words a user can act on.
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class EditReport:
    edit: str
    path: str
    description: str
    hunks: tuple[HunkVerdict, ...]

    @property
    def state(self) -> str:
        states = {h.state for h in self.hunks}
        for state in (State.DRIFT, State.PENDING):
            if state in states:
                return state.value
        return State.APPLIED.value

    @property
    def reason(self) -> str:
        return "; ".join(f"{h.hunk}: {h.reason}" for h in self.hunks if h.reason)

    def to_json(self) -> dict:
        return {
            "edit": self.edit,
            "file": self.path,
            "description": self.description,
            "state": self.state,
            "reason": self.reason,
            "hunks": [
                {"hunk": h.hunk, "state": h.state.value, "reason": h.reason}
                for h in self.hunks
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> EditReport:
        return cls(
            data["edit"],
            data["file"],
            data["description"],
            tuple(
                HunkVerdict(h["hunk"], State(h["state"]), h["reason"])
                for h in data["hunks"]
            ),
        )
