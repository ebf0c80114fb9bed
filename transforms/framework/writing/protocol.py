"""What every writer is: a libcst codemod that rewrites one hunk at a time,
where the edit's judge found it.

A writer never looks for its targets. It follows the site's path (see
resolve.py, which checks that the path still leads to what was judged), and
rewrites there: `forward` turns a pending hunk into the backport's code,
`backward` an applied one back into 0.27.1's, the same rewrite read
backwards. On a file the forward patched, the backward gives back the
original byte for byte; on a file patched some other way, 0.27.1's code by
meaning.

The tree a writer gets may hold only part of the file (regions.py): the
statements its sites point at, with the one before and the one after each,
in the module or in a module-level class's body. A writer that works only
inside the statement its site points at says so (`Site.within`), and its
neighbours are left out.

A writer has the interface of libcst's `Codemod` (built with an optional
`CodemodContext`, run by `transform_module`), so `CodemodTest` drives it,
but does not inherit from it: `libcst.codemod` imports `libcst.matchers`,
which takes longer to load than a target file takes to parse, on every
`apply`. None of the writers needs the context or metadata.
"""

from __future__ import annotations

import textwrap
from typing import ClassVar, TypeVar

import libcst as cst

from ..edit import Edit, Hunk, Site
from ..source import Source
from ..vocabulary import Direction, HunkVerdict, State
from .jobs import parse_module
from .regions import plan, rewrite_regions

Statement = TypeVar("Statement", bound=cst.BaseStatement)


class EditRefused(Exception):
    """The judge found drift: the spec's result is absent and so is its anchor.

    Raised only by `transform_module`, libcst's interface; the engine reads
    the same verdicts as values.
    """

    def __init__(self, edit: str, path: str, drifted: list[HunkVerdict]) -> None:
        self.edit = edit
        self.path = path
        self.drifted = drifted
        super().__init__("; ".join(f"{path}: {edit}/{v.hunk}: {v.reason}" for v in drifted))


class Misjudged(Exception):
    """A rewrite that does not read as its direction leaves a file (a bug)."""


class Writer:
    """Rewrites the hunks of one edit declaration (`EDIT`)."""

    EDIT: ClassVar[Edit]

    def __init__(self, context: object = None, direction: Direction = Direction.APPLY) -> None:
        self.context = context
        self.direction = direction
        #: The module being rewritten; inserted code is fitted to it.
        self.module = cst.Module(body=[])

    # -- libcst's interface, for CodemodTest ---------------------------------

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """Judge the module, refuse on drift, else rewrite it as the engine
        does (its regions only) and check the result."""
        from ... import misjudged

        text = tree.code
        source = Source(text)
        judged = self.EDIT.judged(source, self.direction)
        judgement = [(self.EDIT, self.EDIT.pinned(source, judged))]
        drifted = [h for h in self.EDIT.report(judgement[0][1]).hunks if h.state is State.DRIFT]
        if drifted:
            raise EditRefused(self.EDIT.name, self.EDIT.path, drifted)
        regions = plan(source, judgement, self.direction)
        assert regions is not None, "the sites fit in regions"
        result = rewrite_regions(text, judgement, self.direction, regions, lambda _: type(self))
        assert result is not None, "the regions read as the whole file"
        if result != text:
            problem = misjudged(result, judgement, self.direction)
            if problem is not None:
                raise Misjudged(problem)
        return parse_module(result)

    # -- one hunk ---------------------------------------------------------------

    def rewrite(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        self.module = tree
        if self.direction is Direction.APPLY:
            return self.forward(tree, hunk, site)
        return self.backward(tree, hunk, site)

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        """`tree` with the pending hunk at `site` rewritten to the backport's code."""
        raise NotImplementedError

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        """`tree` with the applied hunk at `site` undone: `forward` read backwards."""
        raise NotImplementedError

    # -- code generation ------------------------------------------------------

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

    def member(self, source: str) -> cst.BaseStatement:
        """Spec code written at depth 0 (a method whose docstring's later
        lines are indented as a module-level function's) as a member of a
        class body: its string content shifted with its code."""
        wrapper = self.statement("class _:\n" + textwrap.indent(source, "    "))
        assert isinstance(wrapper, cst.ClassDef) and isinstance(wrapper.body, cst.IndentedBlock)
        (member,) = wrapper.body.body
        return member

    def expression(self, source: str) -> cst.BaseExpression:
        return cst.parse_expression(source, config=self.module.config_for_parsing)


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
