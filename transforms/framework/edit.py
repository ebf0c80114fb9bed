"""What an edit declares, and what its judge says of each hunk.

An edit is one of the spec's changes in one file (edit 6 spans two files, so
it is two of these under one name), or an upstream fix carried beside them
(`Edit.fix` says where upstream has it). Its module declares it once: each hunk
(where it lives, 0.27.1's code there, the backport's, and why), the judge
that finds every hunk over Python's own parser and says whether the
backport's code is there (applied), 0.27.1's is so the edit is safe
(pending), or neither (drift, in words a user can act on), and the writer
that rewrites it with libcst. The judge gives each hunk a `Site`, the path to
what it found and whatever else the writer needs, so the writer finds
nothing by itself.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple, TypeVar

from .source import Path, Source, Step
from .vocabulary import Direction, EditReport, Fix, HunkVerdict, State


class Role(enum.Enum):
    """What patching the file does to vLLM on its own, which decides when a
    commit writes it (see dflash2_backport.vllm_tree.layout)."""

    #: Adds only what nothing reaches yet: seams, helpers, hooks, fixes.
    SEAM = "seam"
    #: Leads vLLM to DFlash2, or calls what a fix adds in a seam: needs the
    #: modules and the seams in place.
    SWITCH = "switch"


@dataclasses.dataclass(frozen=True, eq=False)
class Hunk:
    name: str
    #: Where it lives, found by structure (never by text); `--explain` says it.
    where: str
    #: What 0.27.1 has there; None where the hunk adds code of its own.
    before: str | None
    #: What the backport leaves there.
    after: str
    #: Why, from the spec: `--explain`, `--json` and the README's table say it.
    why: str


@dataclasses.dataclass(kw_only=True, eq=False)
class Site:
    """Where the judge found a hunk: the statement it rewrites or anchors on.

    Edits that need more (an index, the names to import) subclass it. A
    value: nothing changes a site once made (not frozen only because a
    frozen dataclass costs every command more to define).
    """

    #: The writer rewrites only inside the statement at `path`, never the
    #: statements around it (so they need not be parsed with it).
    within: ClassVar[bool] = False

    path: Path

    def paths(self) -> list[Path]:
        """Every path the site holds: its own and those of its other fields."""
        found = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if _is_path(value):
                found.append(value)
            elif isinstance(value, tuple) and value and all(_is_path(v) for v in value):
                found.extend(value)
        return found

    def with_paths(self, change: Callable[[Path], Path]) -> Site:
        """The site with `change` made to each of its paths."""
        changes: dict[str, object] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if _is_path(value):
                changes[field.name] = change(value)
            elif isinstance(value, tuple) and value and all(_is_path(v) for v in value):
                changes[field.name] = tuple(change(v) for v in value)
        return dataclasses.replace(self, **changes)


def _is_path(value: object) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(s, Step) for s in value)


class Judged(NamedTuple):
    """One hunk judged: its state, why it drifted, and where it is."""

    state: State
    reason: str = ""
    site: Site | None = None


def applied(site: Site | None = None) -> Judged:
    return Judged(State.APPLIED, site=site)


def pending(site: Site | None = None) -> Judged:
    return Judged(State.PENDING, site=site)


def drift(expected: str, found: str) -> Judged:
    """Drift, in the words users see: what the backport needs, what is there."""
    return Judged(State.DRIFT, f"expected {expected}, found {found}")


Item = TypeVar("Item")


def exactly_one(found: Sequence[Item], expected: str) -> Item | Judged:
    """The one thing found, or the drift of finding none or several.

    `expected` says what was looked for ("one method VllmConfig.__init__").
    """
    if len(found) == 1:
        return found[0]
    return drift(expected, f"{len(found)} of them" if found else "none")


#: Judges every hunk of the edit, in its declared order, by hunk name.
Judge = Callable[[Source], dict[str, Judged]]
#: Given the applied hunks, what undoing them removes (as their new sites),
#: or drift where other code still reads it.
BeforeUndo = Callable[[Source, dict[str, Judged]], dict[str, Judged]]


@dataclasses.dataclass(frozen=True, eq=False)
class Edit:
    name: str
    #: Relative to the directory that contains `vllm/`.
    path: str
    description: str
    role: Role
    hunks: tuple[Hunk, ...]
    judge: Judge
    #: The libcst writer, as "folder:Class": the class in the edit's
    #: folder's writer.py.
    writer: str
    before_undo: BeforeUndo | None = None
    #: None for the DFlash2 PR's own edits (the set `apply --only-pr` makes);
    #: the upstream fix this edit carries otherwise.
    fix: Fix | None = None

    def judged(self, source: Source, direction: Direction) -> dict[str, Judged]:
        """Every hunk judged for a command going `direction`."""
        judged = self.judge(source)
        if direction is Direction.REVERT and self.before_undo is not None:
            to_undo = {h: j for h, j in judged.items() if j.state is State.APPLIED}
            if to_undo:
                judged.update(self.before_undo(source, to_undo))
        names = [h.name for h in self.hunks]
        assert list(judged) == names, (self.name, list(judged), names)
        return judged

    def pinned(self, source: Source, judged: dict[str, Judged]) -> dict[str, Judged]:
        """The judged hunks with their sites pinned to what they mean there
        (what a writer checks before it rewrites)."""
        return {
            name: j._replace(site=j.site.with_paths(source.pin))
            if j.site is not None
            else j
            for name, j in judged.items()
        }

    def report(self, judged: dict[str, Judged]) -> EditReport:
        return EditReport(
            self.name,
            self.path,
            self.description,
            tuple(
                HunkVerdict(h.name, judged[h.name].state, judged[h.name].reason, h.why)
                for h in self.hunks
            ),
            self.fix,
        )
