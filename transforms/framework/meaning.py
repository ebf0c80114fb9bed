"""Compare code by meaning: what Python's own parser sees, minus docstrings.

Formatting, comments, quote style, blank lines, trailing commas and
parentheses never reach Python's AST, so two pieces of code that differ only
in those compare equal. Docstrings do reach it; they are dropped because
rewording one changes no behaviour. So does the order an import lists its
names in; it is put in one order, since it binds the same names either way.
A docstring is what Python takes for one: a plain string first in a module,
class or function body, nothing else.

When code does not mean what the spec's does, `where_it_differs` says where,
in a few words a refusal can carry.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import textwrap
from collections.abc import Iterator, Sequence

_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
Code = ast.AST | Sequence[ast.stmt] | str


def is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _bound(alias: ast.alias) -> str:
    return alias.asname or alias.name.partition(".")[0]


@contextlib.contextmanager
def _docstrings_hidden(roots: Sequence[ast.AST]) -> Iterator[None]:
    # The tree is the file's: take the docstrings out, and put an import's
    # names in one order, only while dumping. The order an import lists its
    # names in binds nothing differently, unless one name is bound twice.
    hidden: list[tuple[ast.AST, str, list]] = []
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, _SCOPES) and node.body and is_docstring(node.body[0]):
                hidden.append((node, "body", node.body))
                node.body = node.body[1:] or [ast.Pass()]
            elif isinstance(node, ast.Import | ast.ImportFrom) and len(node.names) > 1:
                bound = [_bound(a) for a in node.names]
                if len(set(bound)) == len(bound):
                    hidden.append((node, "names", node.names))
                    node.names = sorted(node.names, key=lambda a: (a.name, a.asname or ""))
    try:
        yield
    finally:
        for node, field, value in reversed(hidden):
            setattr(node, field, value)


def meaning(code: Code) -> str:
    """Canonical form of a node, of statements, or of source code."""
    if isinstance(code, str):
        return _meaning_of_source(code)
    if isinstance(code, ast.expr):
        wrapped: ast.AST = ast.Expression(body=code)
    elif isinstance(code, ast.Module):
        wrapped = code
    elif isinstance(code, ast.AST):
        wrapped = ast.Module(body=[code], type_ignores=[])
    else:
        wrapped = ast.Module(body=list(code), type_ignores=[])
    with _docstrings_hidden([wrapped]):
        return ast.dump(wrapped, annotate_fields=False)


@functools.lru_cache(maxsize=None)
def _meaning_of_source(source: str) -> str:
    source = textwrap.dedent(source).strip("\n")
    try:
        tree: ast.AST = ast.parse(source, mode="eval")
    except SyntaxError:
        tree = ast.parse(source + "\n")
    return meaning(tree.body)  # type: ignore[attr-defined]


def _kinds(code: Code) -> tuple[type, ...]:
    """The node types at the top of `code` as `meaning` wraps it (a leading
    docstring of statements taken out, `pass` where nothing is left): two
    codes of other kinds differ in meaning, and this is far cheaper to see
    than a dump."""
    if isinstance(code, str):
        return _kinds_of_source(code)
    if isinstance(code, ast.expr):
        return (type(code),)
    if isinstance(code, ast.Module):
        body: list = code.body
    elif isinstance(code, ast.AST):
        body = [code]
    else:
        body = list(code)
    if body and is_docstring(body[0]):
        return tuple(map(type, body[1:])) or (ast.Pass,)
    return tuple(map(type, body))


@functools.lru_cache(maxsize=None)
def _kinds_of_source(source: str) -> tuple[type, ...]:
    # Parsed as `_meaning_of_source` parses it.
    source = textwrap.dedent(source).strip("\n")
    try:
        return (type(ast.parse(source, mode="eval").body),)
    except SyntaxError:
        return _kinds(ast.parse(source + "\n").body)


def same_meaning(a: Code, b: Code) -> bool:
    return _kinds(a) == _kinds(b) and meaning(a) == meaning(b)


def parsed(source: str) -> list[ast.stmt]:
    """Spec code as statements, written at any depth."""
    return ast.parse(textwrap.dedent(source)).body


def function_of(source: str) -> ast.FunctionDef:
    (function,) = parsed(source)
    assert isinstance(function, ast.FunctionDef)
    return function


# -- where code departs from the spec's ---------------------------------------


def code_statements(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.stmt]:
    """The body's statements, a leading docstring left out."""
    body = node.body
    return body[1:] if body and is_docstring(body[0]) else list(body)


def header_of(node: ast.stmt) -> ast.stmt:
    """A compound statement with its body and else-part reduced to `pass`."""
    header = copy.copy(node)
    header.body = [ast.Pass()]  # type: ignore[attr-defined]
    if hasattr(header, "orelse"):
        header.orelse = []  # type: ignore[attr-defined]
    if isinstance(header, ast.FunctionDef | ast.AsyncFunctionDef):
        header.decorator_list = []
    return header


def signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The `def` line with its annotations, on one line."""
    header = " ".join(ast.unparse(header_of(function)).split()).removesuffix(" pass")
    return header if len(header) <= 160 else header[:157] + "..."


def shown(statement: ast.AST, limit: int = 60) -> str:
    """A statement as Python reads it, on one line: no comments, one quote style."""
    text = " ".join(ast.unparse(statement).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def statements_difference(
    ours: Sequence[ast.stmt],
    theirs: Sequence[ast.stmt],
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
        compound = (ast.If, ast.For, ast.While, ast.With)
        if (
            type(a) is type(b)
            and isinstance(a, compound)
            and same_meaning(header_of(a), header_of(b))
        ):
            inner = statements_difference(a.body, b.body, reference, limit)  # type: ignore[attr-defined]
            if inner is None and not isinstance(a, ast.With):
                inner = statements_difference(a.orelse, b.orelse, reference, limit)  # type: ignore[attr-defined]
            if inner is not None:
                return inner
        return f"it has {shown(a, limit)} where {reference} has {shown(b, limit)}"
    if len(ours) > len(theirs):
        return f"it goes on with {shown(ours[len(theirs)], limit)}"
    if len(ours) < len(theirs):
        return f"it lacks {reference}'s {shown(theirs[len(ours)], limit)}"
    return None


def signature_difference(
    found: ast.FunctionDef | ast.AsyncFunctionDef, expected: ast.FunctionDef
) -> str | None:
    """How `found`'s decorators or signature depart from `expected`'s, if they do."""
    if [meaning(d) for d in found.decorator_list] != [
        meaning(d) for d in expected.decorator_list
    ]:
        decorators = " ".join("@" + ast.unparse(d) for d in found.decorator_list)
        return f"its decorators are {decorators or '(none)'!r}"
    if not same_meaning(header_of(found), header_of(expected)):
        return (
            f"its signature is {signature(found)!r} where the spec has "
            f"{signature(expected)!r}"
        )
    return None


def where_it_differs(found: ast.FunctionDef | ast.AsyncFunctionDef, expected_source: str) -> str:
    """Where `found` first departs from the spec's function, in a few words."""
    expected = function_of(expected_source)
    return (
        signature_difference(found, expected)
        or statements_difference(code_statements(found), code_statements(expected))
        or "its body"
    )
