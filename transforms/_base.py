"""The hunk protocol every backport codemod follows, and spec code placed so
that it fits the file, and taken out again.

A codemod owns one of the spec's edits in one file, declared in hunks.py:
each hunk's place, 0.27.1's code there, the backport's, and why. It says
three things about its hunks:

- `judge`: find each one by structure and decide, by meaning and never by
  text, whether the backport's code is there (applied), 0.27.1's is so the
  edit is safe (pending), or neither (drift, with what was expected and what
  was found);
- `forward`: rewrite the pending hunks into the backport's code;
- `backward`: the same rewrite read backwards, for the applied hunks.

The base class runs them: every hunk is judged before anything changes, any
drift refuses the whole edit (and the engine then writes nothing anywhere),
and otherwise the hunks that the direction rewrites are rewritten. Reverting
asks one more question first, `unsafe_to_undo`: whether removing code would
break other code that now reads it. On a file the forward codemod patched,
the backward rewrite gives back the original byte for byte; on a file
patched some other way, 0.27.1's code by meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import libcst as cst

from dflash2_backport.verdicts import Direction, HunkVerdict, State

from ._meaning import same_meaning, where_it_differs
from ._names import members_named
from .hunks import Edit

Statement = TypeVar("Statement", bound=cst.BaseStatement)


class EditRefused(Exception):
    """A codemod found drift: the spec's result is absent and so is its anchor.

    Raised only by `transform_module`, libcst's interface; the engine reads
    the same verdicts from `outcome` as values.
    """

    def __init__(self, edit: str, path: str, drifted: list[HunkVerdict]) -> None:
        self.edit = edit
        self.path = path
        self.drifted = drifted
        super().__init__(
            "; ".join(f"{path}: {edit}/{v.hunk}: {v.reason}" for v in drifted)
        )


@dataclasses.dataclass(frozen=True)
class Judged:
    """One hunk judged: its state, why it drifted, and what the rewrite needs
    (the nodes the judgement found there)."""

    state: State
    reason: str = ""
    site: Any = None


def applied(site: Any = None) -> Judged:
    return Judged(State.APPLIED, site=site)


def pending(site: Any = None) -> Judged:
    return Judged(State.PENDING, site=site)


def drift(expected: str, found: str) -> Judged:
    """Drift, in the words users see: what the backport needs, what is there."""
    return Judged(State.DRIFT, f"expected {expected}, found {found}")


Found = TypeVar("Found")


def exactly_one(found: Sequence[Found], expected: str) -> Found | Judged:
    """The one thing found, or the drift of finding none or several.

    `expected` says what was looked for ("one method VllmConfig.__init__").
    """
    if len(found) == 1:
        return found[0]
    return drift(expected, f"{len(found)} of them" if found else "none")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a codemod made of a module: each hunk's verdict, in the declared
    order, and the module rewritten (None when a hunk drifted: then nothing
    is rewritten)."""

    verdicts: tuple[HunkVerdict, ...]
    tree: cst.Module | None


class BackportCodemod:
    """One spec edit (`SPEC`, declared in hunks.py) as a libcst codemod.

    A subclass says, per hunk, how to judge it (`judge`: where it is and
    whether it means 0.27.1's code, the backport's, or neither) and how to
    rewrite it either way (`forward` for pending hunks, `backward` for
    applied ones, each the other read backwards). The base class refuses on
    drift, rewrites in the direction asked, and reports the verdicts.

    It has the interface of libcst's `Codemod` (built with an optional
    `CodemodContext`, run by `transform_module`), so `CodemodTest` drives it,
    but does not inherit from it: `libcst.codemod` imports `libcst.matchers`,
    which takes longer to load than a target file takes to parse, on every
    `apply`. None of the edits needs the context or metadata.
    """

    SPEC: ClassVar[Edit]
    #: The declaration's edit name, file and description.
    EDIT: ClassVar[str]
    PATH: ClassVar[str]
    DESCRIPTION: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "SPEC" in cls.__dict__:
            cls.EDIT, cls.PATH = cls.SPEC.name, cls.SPEC.path
            cls.DESCRIPTION = cls.SPEC.description

    def __init__(
        self, context: object = None, direction: Direction = Direction.APPLY
    ) -> None:
        self.context = context
        self.direction = direction
        #: The module being transformed; inserted code is fitted to it.
        self.module = cst.Module(body=[])

    def outcome(self, tree: cst.Module) -> Outcome:
        self.module = tree
        judged = self.judge(tree)
        if self.direction is Direction.REVERT:
            judged.update(
                self.unsafe_to_undo(
                    tree, {h: j for h, j in judged.items() if j.state is State.APPLIED}
                )
            )
        names = [h.name for h in self.SPEC.hunks]
        assert list(judged) == names, (list(judged), names)
        verdicts = tuple(HunkVerdict(h, j.state, j.reason) for h, j in judged.items())
        if any(j.state is State.DRIFT for j in judged.values()):
            return Outcome(verdicts, None)
        to_rewrite = {
            h: j.site for h, j in judged.items() if j.state is self.direction.rewrites
        }
        if to_rewrite:
            rewrite = (
                self.forward if self.direction is Direction.APPLY else self.backward
            )
            tree = rewrite(tree, to_rewrite)
        return Outcome(verdicts, tree)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        outcome = self.outcome(tree)
        if outcome.tree is None:
            drifted = [v for v in outcome.verdicts if v.state is State.DRIFT]
            raise EditRefused(self.EDIT, self.PATH, drifted)
        return outcome.tree

    # -- what a subclass declares -------------------------------------------

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        """Every hunk of `SPEC`, in its order, judged by meaning."""
        raise NotImplementedError

    def forward(self, tree: cst.Module, sites: dict[str, Any]) -> cst.Module:
        """`tree` with the pending hunks (by name, with their sites) applied."""
        raise NotImplementedError

    def backward(self, tree: cst.Module, sites: dict[str, Any]) -> cst.Module:
        """`tree` with the applied hunks undone: `forward` read backwards."""
        raise NotImplementedError

    def unsafe_to_undo(
        self, tree: cst.Module, to_undo: dict[str, Judged]
    ) -> dict[str, Judged]:
        """The applied hunks of `to_undo` whose undoing would break the module
        (other code reads what it removes), as drift; a hunk returned as
        applied takes the returned site, what undoing it removes."""
        return {}

    # -- judging helpers ----------------------------------------------------

    def other_version(
        self,
        existing: Sequence[cst.FunctionDef],
        source: str,
        expected: str,
        remedy: str = "the backport will not overwrite it",
    ) -> Judged | None:
        """Drift if a function the spec adds exists with another meaning.

        One with another body is someone else's code: never taken as done,
        never replaced.
        """
        for function in existing:
            if not same_meaning(function, source):
                how = where_it_differs(function, source)
                name = function.name.value
                return drift(expected, f"a different `{name}` ({how}); {remedy}")
        return None

    def method_before(
        self,
        cls: cst.ClassDef,
        source: str,
        anchor: str,
        *,
        expected: str,
        remedy: str,
    ) -> Judged:
        """Judge a method the spec adds right before the method `anchor`.

        An existing method of that name counts as applied only if it means
        what `source` does; `expected` and `remedy` tell the user what the
        spec's does and what to do about theirs. The site: (anchor, new
        method) when pending, the method when applied.
        """
        new = self.statement(source)
        assert isinstance(new, cst.FunctionDef)
        name = new.name.value
        where = cls.name.value
        existing = members_named(cls, cst.FunctionDef, name)
        if len(existing) > 1:
            return drift(f"at most one {where}.{name}", f"{len(existing)}")
        refused = self.other_version(existing, source, expected, remedy)
        if refused is not None:
            return refused
        if existing:
            return applied(existing[0])
        found = exactly_one(
            members_named(cls, cst.FunctionDef, anchor),
            f"one method {where}.{anchor} to add {name} before",
        )
        return found if isinstance(found, Judged) else pending((found, new))

    # -- code generation --------------------------------------------------

    def statement(self, source: str) -> cst.BaseStatement:
        """Spec code as one statement that fits the target file where it goes.

        The file's newline is used inside multi-line strings too (the parser
        keeps a docstring's lines as written), and blank lines carry no
        indentation, so they stay empty once placed inside a block.
        """
        config = self.module.config_for_parsing
        parsed = cst.parse_statement(_in_file_newlines(source, config), config=config)
        return _unindented_blank_lines(parsed)

    def statements(self, source: str) -> list[cst.BaseStatement]:
        """Spec code as statements, fitted as `statement` does."""
        config = self.module.config_for_parsing
        module = cst.parse_module(_in_file_newlines(source, config), config=config)
        return [_unindented_blank_lines(s) for s in module.body]


def _in_file_newlines(source: str, config: cst.PartialParserConfig) -> str:
    return source.replace("\r\n", "\n").replace("\n", config.default_newline)


def _unindented_blank_lines(statement: Statement) -> Statement:
    # Parsed at the top level, a blank line counts as indented (to depth 0)
    # and would print the block's indentation once the statement sits in a
    # block. Blank lines deeper in the statement are parsed unindented.
    return statement.with_changes(
        leading_lines=[
            line.with_changes(indent=False)
            if line.comment is None and not line.whitespace.value
            else line
            for line in statement.leading_lines
        ]
    )


# -- placing new statements and removing them -------------------------------

BLANK_LINE = cst.EmptyLine(indent=False)


def leading_blank_lines(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Split a statement's leading lines into the blank run and the rest.

    The blank run separates the statement from what precedes it; the rest
    (comments) belongs to the statement itself.
    """
    blank = 0
    while blank < len(lines) and lines[blank].comment is None:
        blank += 1
    return list(lines[:blank]), list(lines[blank:])


def with_blank_lines(statement: Statement, at_least: int) -> Statement:
    """The statement apart from what precedes it by at least that many blank lines."""
    blank, rest = leading_blank_lines(statement.leading_lines)
    if len(blank) >= at_least:
        return statement
    return statement.with_changes(leading_lines=[*[BLANK_LINE] * at_least, *rest])


def placed_before(
    anchor: Statement, new: Sequence[cst.BaseStatement], blank_lines: int = 1
) -> list[cst.BaseStatement]:
    """`new` then `anchor`, for the place where `anchor` stood.

    The new code takes the blank lines that separated the anchor from what
    preceded it; comments above the anchor stay with the anchor, which is kept
    at least `blank_lines` apart from the new code (2 between top-level
    definitions, as PEP 8 wants).
    """
    blank, rest = leading_blank_lines(anchor.leading_lines)
    first, *others = new
    separated = anchor.with_changes(
        leading_lines=[*[BLANK_LINE] * max(len(blank), blank_lines), *rest]
    )
    return [first.with_changes(leading_lines=blank), *others, separated]


def insert_before(
    body: Sequence[cst.BaseStatement],
    anchor: cst.BaseStatement,
    new: Sequence[cst.BaseStatement],
    blank_lines: int = 1,
) -> list[cst.BaseStatement]:
    """`body` with `new` placed right before the statement `anchor` (by identity)."""
    out: list[cst.BaseStatement] = []
    for statement in body:
        if statement is anchor:
            out += placed_before(anchor, new, blank_lines)
        else:
            out.append(statement)
    return out


def is_one_of(node: cst.CSTNode, nodes: Sequence[cst.CSTNode]) -> bool:
    return any(node is n for n in nodes)


def removed(
    statements: Sequence[Statement], doomed: Sequence[cst.CSTNode]
) -> list[Statement]:
    """The statements less `doomed` (by identity), as before `placed_before`.

    The statement after each removed run takes back the blank lines that
    separated the run from what preceded it, and keeps its own comments;
    comments written right above a removed statement go with it.
    """
    kept: list[Statement] = []
    handed_back: list[cst.EmptyLine] | None = None
    for statement in statements:
        if is_one_of(statement, doomed):
            if handed_back is None:
                handed_back = leading_blank_lines(statement.leading_lines)[0]
            continue
        if handed_back is not None:
            _, own = leading_blank_lines(statement.leading_lines)
            statement = statement.with_changes(leading_lines=[*handed_back, *own])
            handed_back = None
        kept.append(statement)
    return kept


def edited_class(
    tree: cst.Module,
    cls: cst.ClassDef,
    swap: tuple[cst.BaseStatement, cst.BaseStatement] | None = None,
    insert: tuple[cst.BaseStatement, cst.BaseStatement] | None = None,
    remove: cst.BaseStatement | None = None,
) -> cst.Module:
    """`tree` with one member of `cls` swapped (old, new), one inserted
    (anchor, new) right before the anchor and one removed as `removed` does;
    unchanged when there is none of them."""
    if swap is None and insert is None and remove is None:
        return tree
    body: list[cst.BaseStatement] = list(cls.body.body)
    if swap is not None:
        body = replaced(body, *swap)
    if insert is not None:
        anchor, new = insert
        body = insert_before(body, anchor, [new])
    if remove is not None:
        body = removed(body, [remove])
    new_cls = cls.with_changes(body=cls.body.with_changes(body=body))
    return tree.with_changes(body=replaced(tree.body, cls, new_cls))


def replaced(
    body: Sequence[cst.BaseStatement], old: cst.BaseStatement, new: cst.BaseStatement
) -> list[cst.BaseStatement]:
    """`body` with the statement `old` (by identity) swapped for `new`."""
    return [new if s is old else s for s in body]


def with_block(
    function: cst.FunctionDef,
    block: cst.BaseSuite,
    statements: Sequence[cst.BaseStatement],
) -> cst.FunctionDef:
    """`function` with the statements of `block`, one of its blocks, replaced."""
    assert isinstance(block, cst.IndentedBlock)
    new_function = function.deep_replace(block, block.with_changes(body=statements))
    assert isinstance(new_function, cst.FunctionDef)
    return new_function
