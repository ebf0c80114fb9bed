"""Files whose lines end in CR alone, or in CRLF: read in the encoding
Python reads them in, and rewritten without losing a newline."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
from dflash2_backport.transforms.framework.source import encoding_of
from dflash2_backport.transforms.framework.vocabulary import EditSet, State
from dflash2_backport.transforms.framework.writing.jobs import parse_module

from dflash2_backport.engine.judge import judge
from dflash2_backport.utils.errors import BackportError
from dflash2_backport.utils.safe_files import decode_source
from tests.trees import TARGETS, make_site

# -- the encoding --------------------------------------------------------------

# (bytes, the text Python reads in them). Each is checked against CPython's
# own compile too.
ENCODED = {
    "CR, no cookie, a comment that reads like one further down": (
        b"x = 1\r# speculative decoding: compute K\ry = '\xc3\xa9'\r",
        "x = 1\r# speculative decoding: compute K\ry = '\u00e9'\r",
    ),
    "CR, a cookie on line 1": (
        b"# -*- coding: latin-1 -*-\ry = '\xe9'\r",
        "# -*- coding: latin-1 -*-\ry = '\u00e9'\r",
    ),
    "CR, a cookie on line 2": (
        b"#!/usr/bin/env python\r# coding: latin-1\ry = '\xe9'\r",
        "#!/usr/bin/env python\r# coding: latin-1\ry = '\u00e9'\r",
    ),
    "CRLF, a cookie on line 2": (
        b"#!/usr/bin/env python\r\n# coding: latin-1\r\ny = '\xe9'\r\n",
        "#!/usr/bin/env python\r\n# coding: latin-1\r\ny = '\u00e9'\r\n",
    ),
    "CR, a cookie on line 3 counts for nothing": (
        b"#!/usr/bin/env python\r#\r# coding: latin-1\ry = '\xc3\xa9'\r",
        "#!/usr/bin/env python\r#\r# coding: latin-1\ry = '\u00e9'\r",
    ),
}


@pytest.mark.parametrize("data,text", ENCODED.values(), ids=ENCODED)
def test_a_file_is_decoded_as_python_decodes_it_whatever_its_newlines(
    data: bytes, text: str
) -> None:
    assert decode_source("f.py", data) == text
    assert data.decode(encoding_of(data)) == text
    namespace: dict[str, object] = {}
    exec(compile(data, "f.py", "exec"), namespace)
    assert namespace["y"] == "\u00e9"


def test_a_byte_that_is_not_utf_8_is_placed_on_its_line_counting_cr_as_python_does() -> None:
    with pytest.raises(BackportError, match=r"line 3: byte 0xff"):
        decode_source("f.py", b"x = 1\ry = 2\rz = '\xff'\r")


# -- libcst ---------------------------------------------------------------------

ENDINGS = {
    "a statement": "a = 1\r",
    "a blank line last": "a = 1\r\r",
    "a comment last": "x = 1\r\r# end\r\r",
    "a class's member last": "class A:\r    x = 1\r    # c\r",
    "a docstring last": "def f():\r    '''doc\r    more'''\r",
    "LF lines, CR last": "a = 1\nb = 2\r",
    "CRLF lines, CR last": "a = 1\r\nb = 2\r",
    "CR lines, LF last": "a = 1\rb = 2\n",
    "a newline alone": "\r",
    "nothing": "",
}


@pytest.mark.parametrize("text", ENDINGS.values(), ids=ENDINGS)
def test_libcst_prints_a_text_back_with_its_last_newline(text: str) -> None:
    assert parse_module(text).code == text


# -- every target of 0.27.1 ----------------------------------------------------

NEWLINES = {"CR": b"\r", "CRLF": b"\r\n"}
#: A target as a command found it and as it wrote it: 0.27.1's, apply's, revert's.
Trip = tuple[bytes, bytes, bytes]


def _written(site: Path, goal: EditSet) -> dict[str, bytes]:
    """What the command that leaves `goal` writes, by target, in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH2_BACKPORT_JOBS", "1")
        files = judge(site, want_bytes=True, goal=goal, use_cache=False)
    drifted = [f.path for f in files if any(e.state is State.DRIFT for e in f.edits)]
    assert not drifted
    written = {f.path: f.patched for f in files if f.patched is not None}
    for relative, data in written.items():
        (site / relative).write_bytes(data)
    return written


@pytest.fixture(scope="module")
def trips(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Trip]]:
    """By newline ("LF" too), each target of 0.27.1 written with it, through
    apply and revert; all the targets in one tree, made once."""
    made: dict[str, dict[str, Trip]] = {}

    def trip(name: str) -> dict[str, Trip]:
        if name not in made:
            site = make_site("0.27.1", tmp_path_factory.mktemp(name))
            for relative in TARGETS:
                path = site / relative
                path.write_bytes(path.read_bytes().replace(b"\n", NEWLINES.get(name, b"\n")))
            original = {relative: (site / relative).read_bytes() for relative in TARGETS}
            applied = _written(site, EditSet.ALL)
            reverted = _written(site, EditSet.NONE)
            made[name] = {r: (original[r], applied[r], reverted[r]) for r in TARGETS}
        return made[name]

    return trip


@pytest.mark.wheels
@pytest.mark.parametrize("relative", TARGETS)
@pytest.mark.parametrize("newline", NEWLINES)
def test_apply_then_revert_gives_back_the_exact_bytes_whatever_the_newlines(
    trips: Callable[[str], dict[str, Trip]], newline: str, relative: str
) -> None:
    original, applied, reverted = trips(newline)[relative]
    assert applied != original
    assert reverted == original


@pytest.mark.wheels
@pytest.mark.parametrize("relative", TARGETS)
@pytest.mark.parametrize("newline", NEWLINES)
def test_apply_writes_what_it_writes_with_lf_in_the_files_own_newlines(
    trips: Callable[[str], dict[str, Trip]], newline: str, relative: str
) -> None:
    # What apply writes on the LF file is held to the spec's own patcher
    # (tests/integration/test_real_wheels.py); here it is only the reference.
    _, applied, _ = trips(newline)[relative]
    _, with_lf, _ = trips("LF")[relative]
    ending = NEWLINES[newline]
    assert b"\r" not in applied.replace(ending, b"") and b"\n" not in applied.replace(ending, b"")
    assert ast.dump(ast.parse(applied)) == ast.dump(ast.parse(with_lf))
    assert applied == with_lf.replace(b"\n", ending)
