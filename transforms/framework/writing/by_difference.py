"""Rewrite a run of statements from one form of a hunk to the other, by
their difference (see framework/in_place.py).

The two forms are compared statement by statement, by meaning; where a
compound statement keeps its header (or a function its name), the
comparison goes on inside it. Only statements that differ are rewritten:

* a statement only the new form has is inserted as that form writes it,
  with the comments above it;
* statements the new form writes otherwise are replaced by its own; the
  first keeps the comments and blank lines the file had above the old one
  (the old form's own comment there, if the file has it, giving way to the
  new form's), the last keeps a comment at the end of its line;
* a statement only the old form has goes, with the comments above it;
* a function whose signature differs takes the new form's, decorators and
  body kept.

Every other statement is the file's own, untouched. Reading the forms the
other way round undoes all of it: on a file the forward wrote, the
backward gives back the original byte for byte.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from difflib import SequenceMatcher

import libcst as cst

from ..edit import Hunk, Site
from ..meaning import header_of, is_docstring, meaning, parsed
from ..in_place import Run
from ..source import DEFINITIONS
from .placement import leading_blank_lines
from .protocol import Writer
from .resolve import locate

#: Compound statements compared inside when their headers agree.
_NESTABLE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.If, ast.For, ast.While, ast.With)


class StatementRunWriter(Writer):
    """The writer of an edit whose hunks are runs of statements: forwards,
    0.27.1's form rewritten into the fix's where they differ; backwards, the
    reverse."""

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return rewritten_run(self, tree, site, *_forms(hunk, site))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return rewritten_run(self, tree, site, *reversed(_forms(hunk, site)))


def _forms(hunk: Hunk, site: Site) -> tuple[str, str]:
    """(the base form, the fix's): the hunk's, or the other release's the
    judge found (`Run.before`, `Run.after`)."""
    before = getattr(site, "before", None) or hunk.before
    after = getattr(site, "after", None) or hunk.after
    assert before is not None
    return before, after


def rewritten_run(
    writer: Writer, tree: cst.Module, site: Site, old: str, new: str
) -> cst.Module:
    """`tree` with the run at `site`, which means `old`, rewritten to mean `new`."""
    assert isinstance(site, Run)
    first = locate(tree, site.path)
    count = 1 + len(site.more)
    items = first.siblings
    at = first.position
    for offset, path in enumerate(site.more, start=1):
        assert locate(tree, path).statement is items[at + offset], "a run is consecutive"
    old, new = textwrap.dedent(old), textwrap.dedent(new)
    items[at : at + count] = _rewritten(
        items[at : at + count],
        _Form(parsed(old), writer.statements(old)),
        _Form(parsed(new), writer.statements(new)),
    )
    return first.with_siblings(items)


class _Form:
    """One form of the code: Python's statements, and libcst's as it writes them."""

    def __init__(self, nodes: Sequence[ast.stmt], statements: Sequence[cst.BaseStatement]):
        assert len(nodes) == len(statements), "each statement has a line of its own"
        self.nodes = list(nodes)
        self.statements = list(statements)

    def inside(self, index: int) -> _Form:
        """The body of the compound statement at `index`, docstring left out."""
        node = self.nodes[index]
        block = self.statements[index].body  # type: ignore[attr-defined]
        assert isinstance(block, cst.IndentedBlock)
        skip = 1 if _has_docstring(node) else 0
        return _Form(node.body[skip:], block.body[skip:])  # type: ignore[attr-defined]


def _has_docstring(node: ast.stmt) -> bool:
    body = getattr(node, "body", None)
    return isinstance(node, DEFINITIONS) and bool(body) and is_docstring(body[0])  # type: ignore[arg-type]


def _cst_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def _header(node: ast.stmt) -> str:
    return meaning(header_of(node))


def _nestable(a: ast.stmt, b: ast.stmt) -> bool:
    if type(a) is not type(b) or not isinstance(a, _NESTABLE):
        return False
    if meaning(getattr(a, "orelse", [])) != meaning(getattr(b, "orelse", [])):
        return False
    if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
        return a.name == b.name  # type: ignore[attr-defined]
    return _header(a) == _header(b)


def _key(node: ast.stmt) -> str:
    """What a statement is about, whatever it computes: the names it
    assigns, the function it calls, the kind and header of a block."""
    if isinstance(node, ast.Assign):
        return "assign " + " ".join(ast.unparse(t) for t in node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return "assign " + ast.unparse(node.target)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return "call " + ast.unparse(node.value.func)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return f"def {node.name}"
    if isinstance(node, _NESTABLE):
        return _header(node)
    return type(node).__name__


def _opcodes(old: _Form, new: _Form) -> list[tuple[str, int, int, int, int]]:
    """The differences, in the order of the file: statements compared by
    meaning, then, where they differ, paired by what they are about, so
    that a statement rewritten keeps the comments above it; "nest" for a
    compound statement to compare inside."""
    matcher = SequenceMatcher(
        None, [meaning(n) for n in old.nodes], [meaning(n) for n in new.nodes], autojunk=False
    )
    ops = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag != "replace":
            ops.append((tag, i1, i2, j1, j2))
            continue
        keys = SequenceMatcher(
            None,
            [_key(n) for n in old.nodes[i1:i2]],
            [_key(n) for n in new.nodes[j1:j2]],
            autojunk=False,
        )
        for kind, a1, a2, b1, b2 in keys.get_opcodes():
            a1, a2, b1, b2 = a1 + i1, a2 + i1, b1 + j1, b2 + j1
            if kind != "equal":
                ops.append((kind, a1, a2, b1, b2))
                continue
            for i, j in zip(range(a1, a2), range(b1, b2)):
                nest = _nestable(old.nodes[i], new.nodes[j])
                ops.append(("nest" if nest else "replace", i, i + 1, j, j + 1))
    return ops


def _rewritten(
    items: Sequence[cst.BaseStatement], old: _Form, new: _Form
) -> list[cst.BaseStatement]:
    """The file's statements `items` (meaning `old`) rewritten to mean `new`."""
    assert len(items) == len(old.nodes), "the file's code means the old form"
    result = list(items)
    for tag, i1, i2, j1, j2 in reversed(_opcodes(old, new)):
        if tag == "nest":
            result[i1] = _nested(items[i1], old, i1, new, j1)
            continue
        replacement = list(new.statements[j1:j2])
        if i1 < i2 and replacement:
            replacement[0] = _with_leading_lines(
                replacement[0], items[i1], old.statements[i1], new.statements[j1]
            )
            replacement[-1] = _with_trailing_comment(
                replacement[-1], items[i2 - 1], old.statements[i2 - 1], new.statements[j2 - 1]
            )
        result[i1:i2] = replacement
    return result


def _nested(
    statement: cst.BaseStatement, old: _Form, i: int, new: _Form, j: int
) -> cst.BaseStatement:
    block = statement.body  # type: ignore[attr-defined]
    if not isinstance(block, cst.IndentedBlock):
        # A one-line body (`if x: y`): the whole statement is rewritten.
        replacement = _with_leading_lines(
            new.statements[j], statement, old.statements[i], new.statements[j]
        )
        return replacement
    keep = 1 if block.body and _cst_docstring(block.body[0]) else 0
    body = [*block.body[:keep], *_rewritten(block.body[keep:], old.inside(i), new.inside(j))]
    rewritten = statement.with_changes(body=block.with_changes(body=body))
    a, b = old.nodes[i], new.nodes[j]
    if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef) and _header(a) != _header(b):
        signature = new.statements[j]
        assert isinstance(signature, cst.FunctionDef)
        rewritten = rewritten.with_changes(
            params=signature.params,
            whitespace_before_params=signature.whitespace_before_params,
            returns=signature.returns,
            whitespace_before_colon=signature.whitespace_before_colon,
        )
    decorators_a = [meaning(d) for d in getattr(a, "decorator_list", [])]
    decorators_b = [meaning(d) for d in getattr(b, "decorator_list", [])]
    if decorators_a != decorators_b:
        rewritten = rewritten.with_changes(decorators=new.statements[j].decorators)  # type: ignore[attr-defined]
    return rewritten


def _own(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """A statement's own comment lines: those after the blank run that
    separates it from what precedes it."""
    return leading_blank_lines(lines)[1]


def _text(lines: Sequence[cst.EmptyLine]) -> list[str | None]:
    return [line.comment.value if line.comment else None for line in lines]


def _with_leading_lines(
    statement: cst.BaseStatement,
    replaced: cst.BaseStatement,
    old: cst.BaseStatement,
    new: cst.BaseStatement,
) -> cst.BaseStatement:
    """`statement` (the new form's) under the lines the file had above the
    statement it replaces; where the two forms comment it differently, the
    old form's comment gives way to the new form's."""
    lines = list(replaced.leading_lines)
    own_old, own_new = _own(old.leading_lines), _own(new.leading_lines)
    if _text(own_old) != _text(own_new):
        if own_old and _text(lines[len(lines) - len(own_old) :]) == _text(own_old):
            lines = lines[: len(lines) - len(own_old)]
        lines += own_new
    return statement.with_changes(leading_lines=lines)


def _trailing(statement: cst.BaseStatement) -> str | None:
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    comment = statement.trailing_whitespace.comment
    return comment.value if comment else None


def _with_trailing_comment(
    statement: cst.BaseStatement,
    replaced: cst.BaseStatement,
    old: cst.BaseStatement,
    new: cst.BaseStatement,
) -> cst.BaseStatement:
    """A comment at the end of the replaced line stays at the end of the
    last new one, unless it is the old form's own and the new form has its own."""
    if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(
        replaced, cst.SimpleStatementLine
    ):
        return statement
    if _trailing(old) != _trailing(new) and _trailing(replaced) == _trailing(old):
        return statement
    return statement.with_changes(trailing_whitespace=replaced.trailing_whitespace)
