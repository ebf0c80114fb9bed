"""The words the edits, the engine and the report share: a hunk's state, the
direction of a command, the set of edits it leaves in a tree, and the
verdicts that pass from the judge to the report and the verdict cache.

Nothing here imports anything of the project, so every other module may
import it: the arrows run from the tool to the edits, never back.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol


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

    def of(self, edit: object) -> Direction:
        """This direction, for every edit alike (see `EditSet.of`)."""
        return self


@dataclasses.dataclass(frozen=True)
class Fix:
    """An upstream fix the DFlash2 path depends on, carried beside the
    DFlash2 PR's own edits: where upstream has it."""

    #: Upstream's reference, as cited ("#54282"), or "" where none is known.
    pr: str
    #: The first release that carries it ("0.29.0"), or "unreleased".
    release: str

    def describe(self) -> str:
        """"fix #57941, upstream 0.33.0", as the reports print it."""
        where = (
            "not yet upstream" if self.release == "unreleased"
            else f"upstream {self.release}"
        )
        return f"fix {self.pr}, {where}" if self.pr else f"fix, {where}"


class CarriesFix(Protocol):
    """An edit's declaration, or its report."""

    @property
    def fix(self) -> Fix | None: ...


class EditSet(enum.Enum):
    """Which edits a command leaves in the tree. Each edit's direction
    follows from it, so one command can add some edits and undo others:
    `apply --only-pr` on a tree that holds every edit undoes the fixes and
    leaves the PR's edits."""

    #: `apply`: the DFlash2 PR's edits and the upstream fixes.
    ALL = "all"
    #: `apply --only-pr`: the DFlash2 PR's edits alone, as vLLM 0.28.0 has them.
    PR = "pr"
    #: `revert`: none.
    NONE = "none"

    def of(self, edit: CarriesFix) -> Direction:
        """The direction the command rewrites `edit` in."""
        if self is EditSet.ALL or (self is EditSet.PR and edit.fix is None):
            return Direction.APPLY
        return Direction.REVERT

    @property
    def direction(self) -> Direction:
        """The command's own direction: the new modules go with the PR's
        edits, and a commit is ordered by it."""
        return Direction.REVERT if self is EditSet.NONE else Direction.APPLY


#: What a command asks of each edit: one direction for all of them, or a set
#: of edits to leave in the tree (each with its own direction). Either
#: answers `.of(edit)`.
Goal = Direction | EditSet


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
    #: The upstream fix the edit carries; None for the DFlash2 PR's own.
    fix: Fix | None = None

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
            "set": "pr" if self.fix is None else "fix",
            "upstream_pr": self.fix.pr or None if self.fix else None,
            "upstream_release": self.fix.release if self.fix else None,
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
            None if data["set"] == "pr"
            else Fix(data["upstream_pr"] or "", data["upstream_release"]),
        )
