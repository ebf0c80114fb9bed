"""Compare code by meaning: what Python's own parser sees, minus docstrings.

Formatting, comments, quote style, blank lines, trailing commas and
parentheses never reach Python's AST, so two pieces of code that differ only
in those compare equal. Docstrings do reach it; they are dropped because
rewording one changes no behaviour.
"""

from __future__ import annotations

import ast
import textwrap
from functools import lru_cache

import libcst as cst

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
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
