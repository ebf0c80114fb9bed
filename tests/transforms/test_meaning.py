"""Meaning: what Python's parser sees, docstrings aside, and only docstrings."""

import pytest

from dflash2_backport.transforms.meaning import same_meaning

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
