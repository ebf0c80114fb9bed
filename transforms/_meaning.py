"""Compare code by meaning: what Python's own parser sees, minus docstrings.

Formatting, comments, quote style, blank lines, trailing commas and
parentheses never reach Python's AST, so two pieces of code that differ only
in those compare equal. Docstrings do reach it; they are dropped because
rewording one changes no behaviour.

When code does not mean what the spec's does, `where_it_differs` says where,
in a few words a refusal can carry.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Sequence
from functools import lru_cache

import libcst as cst

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=None)
def meaning_of_source(source: str) -> str:
    """Canonical form of statements or of one expression, given as source."""
    source = textwrap.dedent(source).strip("\n")
    try:
        tree: ast.AST = ast.parse(source, mode="eval")
    except SyntaxError:
        tree = ast.parse(source + "\n")
    return ast.dump(_strip_docstrings(tree), annotate_fields=False)


def meaning(node: cst.CSTNode | str) -> str:
    if isinstance(node, str):
        return meaning_of_source(node)
    if isinstance(node, cst.FunctionDef | cst.ClassDef):
        # Decorators are part of the meaning; leading comments are not.
        node = node.with_changes(leading_lines=())
    return meaning_of_source(code_of(node))


def same_meaning(a: cst.CSTNode | str, b: cst.CSTNode | str) -> bool:
    return meaning(a) == meaning(b)


def describe(node: cst.CSTNode, limit: int = 60) -> str:
    """A short, single-line rendering of a node for error messages."""
    text = " ".join(code_of(node).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain string literal, whatever its quotes; else None."""
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


# -- where a function departs from the spec's -------------------------------


def _is_docstring(small: cst.BaseSmallStatement) -> bool:
    # What Python's parser takes as a docstring: a plain (not f-) string.
    return isinstance(small, cst.Expr) and isinstance(
        small.value, cst.SimpleString | cst.ConcatenatedString
    )


def opens_with_docstring(statement: cst.CSTNode) -> bool:
    """Whether the line starts with a docstring, alone or before `; more`."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and bool(statement.body)
        and _is_docstring(statement.body[0])
    )


def is_docstring(statement: cst.CSTNode) -> bool:
    """Whether the line is a docstring and nothing else."""
    return opens_with_docstring(statement) and len(statement.body) == 1  # type: ignore[attr-defined]


# libcst.matchers would say these in a pattern, but it costs more to import
# than parsing a file: the helpers below keep it off every command's path.


def find_all(
    node: cst.CSTNode, test: Callable[[cst.CSTNode], bool]
) -> list[cst.CSTNode]:
    """The nodes of the subtree, `node` included, that pass `test`, in
    document order."""
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, inner: cst.CSTNode) -> bool:
            if test(inner):
                found.append(inner)
            return True

    node.visit(Collect())
    return found


def is_attribute(node: cst.CSTNode, owner: str, name: str) -> bool:
    """Whether `node` is `owner.name`, e.g. `self.layers`."""
    return (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == owner
        and node.attr.value == name
    )


def dotted(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a name or attribute chain; None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        owner = dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr.value}"
    return None


def statements_of(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    return list(block.body) if isinstance(block, cst.IndentedBlock) else []


def code_statements(
    function: cst.FunctionDef | cst.ClassDef,
) -> list[cst.BaseStatement]:
    """The body's statements, a leading docstring left out."""
    statements = statements_of(function.body)
    return statements[1:] if statements and is_docstring(statements[0]) else statements


_PASS = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])


def _header(node: cst.CSTNode) -> cst.CSTNode:
    """A compound statement with its body and else-part reduced to `pass`."""
    changes: dict[str, object] = {"body": _PASS}
    if isinstance(node, cst.FunctionDef):
        changes.update(decorators=(), leading_lines=())
    if getattr(node, "orelse", None) is not None:
        changes["orelse"] = None
    return node.with_changes(**changes)


def signature(function: cst.FunctionDef) -> str:
    """The `def` line with its annotations, on one line."""
    header = " ".join(code_of(_header(function)).split()).removesuffix(" pass")
    return header if len(header) <= 160 else header[:157] + "..."


def _else(node: cst.If | cst.For | cst.While) -> list[cst.BaseStatement]:
    if isinstance(node.orelse, cst.If):
        return [node.orelse]
    return statements_of(node.orelse.body) if node.orelse is not None else []


def _shown(statement: cst.BaseStatement, limit: int) -> str:
    """A statement as Python reads it, on one line: no comments, one quote style."""
    source = textwrap.dedent(code_of(statement.with_changes(leading_lines=())))
    try:
        source = ast.unparse(ast.parse(source))
    except SyntaxError:
        pass
    text = " ".join(source.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def statements_difference(
    ours: Sequence[cst.BaseStatement],
    theirs: Sequence[cst.BaseStatement],
    reference: str = "the spec",
    limit: int = 60,
) -> str | None:
    """The first statement where `ours` departs from `theirs`, or None.

    Descends into an `if`/`for`/`while`/`with` whose header matches, so the
    message points at the line that differs rather than the block around it.
    """
    for a, b in zip(ours, theirs):
        if same_meaning(a, b):
            continue
        compound = (cst.If, cst.For, cst.While, cst.With)
        if (
            type(a) is type(b)
            and isinstance(a, compound)
            and same_meaning(_header(a), _header(b))
        ):
            inner = statements_difference(
                statements_of(a.body), statements_of(b.body), reference, limit
            )
            if inner is None and isinstance(a, cst.If | cst.For | cst.While):
                inner = statements_difference(_else(a), _else(b), reference, limit)
            if inner is not None:
                return inner
        return f"it has {_shown(a, limit)} where {reference} has {_shown(b, limit)}"
    if len(ours) > len(theirs):
        return f"it goes on with {_shown(ours[len(theirs)], limit)}"
    if len(ours) < len(theirs):
        return f"it lacks {reference}'s {_shown(theirs[len(ours)], limit)}"
    return None


def function_of(source: str) -> cst.FunctionDef:
    function = cst.parse_statement(textwrap.dedent(source))
    assert isinstance(function, cst.FunctionDef)
    return function


def signature_difference(
    found: cst.FunctionDef, expected: cst.FunctionDef
) -> str | None:
    """How `found`'s decorators or signature depart from `expected`'s, if they do."""
    if [meaning(d.decorator) for d in found.decorators] != [
        meaning(d.decorator) for d in expected.decorators
    ]:
        decorators = " ".join("@" + code_of(d.decorator) for d in found.decorators)
        return f"its decorators are {decorators or '(none)'!r}"
    if not same_meaning(_header(found), _header(expected)):
        return (
            f"its signature is {signature(found)!r} where the spec has "
            f"{signature(expected)!r}"
        )
    return None


def where_it_differs(found: cst.FunctionDef, expected_source: str) -> str:
    """Where `found` first departs from the spec's function, in a few words."""
    expected = function_of(expected_source)
    return (
        signature_difference(found, expected)
        or statements_difference(code_statements(found), code_statements(expected))
        or "its body"
    )
