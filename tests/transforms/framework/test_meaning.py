"""Meaning: what Python's parser sees, docstrings aside, and only docstrings."""

import ast
import textwrap

import pytest

from dflash2_backport.transforms.framework.meaning import same_meaning

RETURNS = "def f():\n    return 1\n"

# (code, means what RETURNS means)
CASES = {
    "a docstring": ('def f():\n    """Doc."""\n    return 1\n', True),
    "implicitly concatenated strings form a docstring": (
        'def f():\n    "Doc" " more."\n    return 1\n',
        True,
    ),
    "comments, parentheses and quotes": ("def f():  # one\n    return (1)\n", True),
    "a number first is code": ("def f():\n    0\n    return 1\n", False),
    "bytes first are code": ("def f():\n    b'Doc.'\n    return 1\n", False),
    "an f-string first is code": ("def f():\n    f'{g()}'\n    return 1\n", False),
    "a string second is code": ("def f():\n    return 1\n    'late'\n", False),
    "an ellipsis first is code": ("def f():\n    ...\n    return 1\n", False),
}


@pytest.mark.parametrize("code, same", CASES.values(), ids=CASES.keys())
def test_only_a_leading_plain_string_is_a_docstring(code: str, same: bool) -> None:
    assert same_meaning(code, RETURNS) is same


def _statements(source: str) -> list[ast.stmt]:
    return ast.parse(textwrap.dedent(source)).body


def _module(source: str) -> ast.Module:
    return ast.parse(source)


# (one form of code, another, same meaning): nodes, statement lists and
# source text compare alike, whatever form each side comes in.
FORMS = {
    "a lone docstring reads as pass": (_statements('"""Doc."""'), _statements("pass"), True),
    "a docstring before statements is left out": (
        _statements('"""Doc."""\nx = 1'), _statements("x = 1"), True),
    "a statement is its one-statement list": (_statements("x = 1")[0], _statements("x = 1"), True),
    "a module is its statements": (_module("x = 1\ny = 2"), _statements("x = 1\ny = 2"), True),
    "source is the statements it parses to": ("x = 1\ny = 2", _statements("x = 1\ny = 2"), True),
    "an expression is not a statement": ("f()", _statements("f()"), False),
    "other kinds of statement": ("x = 1", _statements("x += 1"), False),
    "the same kinds, other code": ("x = 1", _statements("x = 2"), False),
    "one statement more": ("x = 1", _statements("x = 1\nx = 1"), False),
}


@pytest.mark.parametrize("one, other, same", FORMS.values(), ids=FORMS.keys())
def test_code_means_the_same_in_every_form(one, other, same: bool) -> None:
    assert same_meaning(one, other) is same
    assert same_meaning(other, one) is same


# (one import, another, same meaning): the order an import lists its names in
# binds nothing differently, unless a name is bound twice.
IMPORTS = {
    "names in another order": (
        "from m import a, b", "from m import b, a", True),
    "aliases in another order": (
        "from m import a as x, b as y", "from m import b as y, a as x", True),
    "modules in another order": ("import os, sys", "import sys, os", True),
    "another name": ("from m import a, b", "from m import a, c", False),
    "the same names from another module": ("from m import a, b", "from n import b, a", False),
    "a name bound twice: the last one wins": (
        "from m import a as x, b as x", "from m import b as x, a as x", False),
    "the order of statements still counts": (
        "from m import a\nfrom m import b", "from m import b\nfrom m import a", False),
}


@pytest.mark.parametrize("one, other, same", IMPORTS.values(), ids=IMPORTS.keys())
def test_an_import_means_the_same_whatever_order_it_lists_its_names_in(
    one: str, other: str, same: bool
) -> None:
    assert same_meaning(one, other) is same
    assert same_meaning(_statements(other), one) is same
    # Comparing leaves the parsed tree as it was.
    tree = _statements(other)
    before = ast.dump(tree[0])
    same_meaning(tree, one)
    assert ast.dump(tree[0]) == before
