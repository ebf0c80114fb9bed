"""The words the edits, the engine and the report share: a hunk's state, the
direction of a command, and the verdicts that pass from the judge to the
report and the verdict cache.

Nothing here imports anything of the project, so every other module may
import it: the arrows run from the tool to the edits, never back.
"""

from __future__ import annotations

import dataclasses
import enum


class State(str, enum.Enum):
    """Where a hunk stands: the spec's result is there, its anchor is (so the
    edit is safe), or neither.

    Members are str-valued, so they equal the words the JSON report uses
    ("applied", "pending", "drift") and print as those words.
    """

    APPLIED = "applied"
    PENDING = "pending"
    DRIFT = "drift"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Direction(enum.Enum):
    """Which way a command rewrites the tree."""

    APPLY = "apply"
    REVERT = "revert"

    @property
    def rewrites(self) -> State:
        """The hunk state this direction changes: apply patches pending hunks,
        revert undoes applied ones."""
        return State.PENDING if self is Direction.APPLY else State.APPLIED

    @property
    def leaves(self) -> State:
        """The state every hunk reads once this direction has rewritten the file."""
        return State.APPLIED if self is Direction.APPLY else State.PENDING


@dataclasses.dataclass(frozen=True)
class HunkVerdict:
    """One hunk judged, as the report and the verdict cache keep it."""

    hunk: str
    state: State
    #: For drift: "expected ..., found ..." in words a user can act on.
    reason: str = ""
    #: Why the backport makes this change (the declaration's `why`).
    why: str = ""


@dataclasses.dataclass(frozen=True)
class EditReport:
    """Every hunk of one edit in one file, judged."""

    edit: str
    path: str
    description: str
    hunks: tuple[HunkVerdict, ...]

    @property
    def state(self) -> State:
        """The edit's state: drift if any hunk drifted, else pending if any
        hunk is, else applied."""
        states = {h.state for h in self.hunks}
        for state in (State.DRIFT, State.PENDING):
            if state in states:
                return state
        return State.APPLIED

    def has(self, state: State) -> bool:
        return any(h.state is state for h in self.hunks)

    @property
    def reason(self) -> str:
        return "; ".join(f"{h.hunk}: {h.reason}" for h in self.hunks if h.reason)

    def to_json(self) -> dict:
        return {
            "edit": self.edit,
            "file": self.path,
            "description": self.description,
            "state": self.state.value,
            "reason": self.reason,
            "hunks": [
                {"hunk": h.hunk, "state": h.state.value, "reason": h.reason, "why": h.why}
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
                HunkVerdict(h["hunk"], State(h["state"]), h["reason"], h["why"])
                for h in data["hunks"]
            ),
        )
