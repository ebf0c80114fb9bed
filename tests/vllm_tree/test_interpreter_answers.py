"""What `--python` prints, read for the tool's answer and nothing else.

A `.pth` file or sitecustomize may print anything at start-up, in any
encoding, before the interpreter answers; a program that is not Python may
print JSON of another shape. Each interpreter here is a shell script: one
that prints first and then runs Python on a 0.27.1 site-packages, or one
that only prints.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.vllm_tree.test_interpreter import BASE_PYTHON, tool
from tests.trees import make_site


def interpreter(tmp_path: Path, body: bytes) -> Path:
    script = tmp_path / "python"
    script.write_bytes(b"#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def printing_then_python(printed: bytes, site: Path) -> bytes:
    """A script printing `printed` (a shell command), then running Python
    with vLLM on its path."""
    python = shlex.quote(str(BASE_PYTHON)).encode()
    path = shlex.quote(str(site)).encode()
    return printed + b"\nPYTHONPATH=" + path + b" exec " + python + b' "$@"\n'


# Each: what start-up prints before Python answers.
START_UP_NOISE = {
    "a Latin-1 byte on stderr": rb"printf 'note: caf\351\n' >&2",
    "a Latin-1 byte on stdout, on a line of its own": rb"printf 'caf\351\n'",
    "a Latin-1 byte on stdout, the answer on the same line": rb"printf 'caf\351 '",
    "a stray brace and a Latin-1 byte on stdout": rb"printf '{caf\351 '",
    "bytes of no encoding on both": rb"printf '\377\376\n'; printf '\200\n' >&2",
}


@pytest.mark.wheels
@pytest.mark.parametrize("printed", START_UP_NOISE.values(), ids=START_UP_NOISE.keys())
def test_what_start_up_prints_does_not_hide_the_answer(tmp_path: Path, printed: bytes) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    python = interpreter(tmp_path, printing_then_python(printed, site))
    result = tool("check", "--python", python)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"vLLM 0.27.1 at {site}"


# Each: (what the interpreter prints and how it ends, what the one line says).
NO_ANSWER_OF_PYTHON = {
    "a package that is a number":
        (b"""echo '{"package": 5}'""", "not a Python interpreter"),
    "a package that is a list":
        (b"""echo '{"package": ["a"]}'""", "not a Python interpreter"),
    "a distribution that is a string":
        (b"""echo '{"package": "/x", "dist": "x"}'""", "not a Python interpreter"),
    "a distribution path that is a number":
        (b"""echo '{"package": "/x", "dist": {"path": 5}}'""", "not a Python interpreter"),
    "a version that is a list":
        (b"""echo '{"package": "/x", "dist": {"version": [0, 27]}}'""",
         "not a Python interpreter"),
    "an executable that is a number":
        (b"""echo '{"package": "/x", "executable": 7}'""", "not a Python interpreter"),
    "a JSON list":
        (b"""echo '[{"package": "/x"}]'""", "not a Python interpreter"),
    "bytes of no encoding":
        (rb"printf '\351\377\n'", "not a Python interpreter"),
    "a traceback with a Latin-1 byte, and failure":
        (rb"printf 'Traceback (most recent call last):\nValueError: caf\351\n' >&2; exit 1",
         "could not ask it where vllm is (ValueError: caf"),
}


@pytest.mark.parametrize(
    ("printed", "needle"), NO_ANSWER_OF_PYTHON.values(), ids=NO_ANSWER_OF_PYTHON.keys()
)
def test_what_is_not_an_answer_of_python_is_one_line_naming_the_interpreter(
    tmp_path: Path, printed: bytes, needle: str
) -> None:
    python = interpreter(tmp_path, printed + b"\n")
    result = tool("check", "--python", python)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {python}: {needle}"), line
    assert "; pass --python the Python" in line, line
