"""How a command line reaches a command: the plain lines hooks and scripts
run are read against the commands' own declarations without typer, and
everything else goes to typer; either way the command gets the same
arguments, and a mistyped line is one line on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli import main as cli
from tests.vllm_tree.test_interpreter import TOOL

PLAIN = {
    "check, nothing else": ["check"],
    "check --root .": ["check", "--root", "."],
    "check --root=.": ["check", "--root=."],
    "check, every flag": ["check", "--python", "py", "--diff", "--json", "--force", "--only-pr"],
    "check --diff-modules": ["check", "--site-packages", "/x y", "--diff-modules"],
    "check as its hook runs it": ["check", "--root", ".", "--from-pre-commit"],
    "apply as its hook runs it": ["apply", "--root", ".", "--fail-if-changed"],
    "apply --only-pr --python=python3": ["apply", "--only-pr", "--python=python3"],
    "revert --site-packages": ["revert", "--site-packages", "sp", "--json"],
}

TO_TYPER = {
    "no command": [],
    "help": ["check", "--help"],
    "a mistyped option": ["check", "--roo", "."],
    "a missing value": ["check", "--root"],
    "an option twice": ["check", "--root", "a", "--root", "b"],
    "a value given to a flag": ["check", "--diff=yes"],
    "a word that is no option": ["check", "extra"],
    "verify": ["verify"],
    "the version": ["--version"],
    "an option of another command": ["check", "--fail-if-changed"],
    "an empty path": ["check", "--root", ""],
    "an empty path after =": ["check", "--root="],
}


def _calls(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    monkeypatch.setattr(cli, "_run", lambda *a, **k: calls.append((a, k)) or 0)
    return calls


@pytest.mark.parametrize("argv", PLAIN.values(), ids=PLAIN.keys())
def test_a_plain_command_line_calls_the_command_as_typer_does(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    calls = _calls(monkeypatch)
    through_typer = CliRunner().invoke(cli.app, argv)
    assert through_typer.exit_code == 0, through_typer.output
    plain = cli._plain_call(argv)
    assert plain is not None
    command, arguments = plain
    with pytest.raises(SystemExit):
        command(**arguments)
    assert len(calls) == 2
    assert calls[0] == calls[1]


@pytest.mark.parametrize("argv", TO_TYPER.values(), ids=TO_TYPER.keys())
def test_any_other_command_line_is_left_to_typer(argv: list[str]) -> None:
    assert cli._plain_call(argv) is None


PLAIN_CHECK = (
    "import sys\n"
    "from dflash2_backport.cli.main import main\n"
    "sys.argv = ['dflash2-backport', 'check', '--root', sys.argv[1]]\n"
    "try:\n"
    "    main()\n"
    "finally:\n"
    "    print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click')))\n"
)


def test_a_plain_check_is_answered_without_importing_typer(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", PLAIN_CHECK, str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "[]\n"
    assert result.stderr == f"dflash2-backport: error: {tmp_path}: no vllm/ package here; " \
        "pass --root the directory that contains vllm/\n"


def test_a_line_left_to_typer_imports_it() -> None:
    # The same probe sees typer where the line needs it.
    result = subprocess.run([sys.executable, "-c", PLAIN_CHECK.replace("'check', ", "'check', '--roo', "), "."],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "'typer'" in result.stdout


USAGE_ERRORS = {
    "a mistyped option": (["check", "--roo", "."], "`dflash2-backport check`", "--root"),
    "a missing value": (["apply", "--root"], "`dflash2-backport apply`", "requires an argument"),
    "a mistyped command": (["chek"], "`dflash2-backport`", "'check'"),
    "a mistyped option of verify": (["verify", "--gpux"], "`dflash2-backport verify`", "--gpu"),
    "a dtype verify does not run": (["verify", "--gpu", "--dtype", "float64"],
                                    "`dflash2-backport verify`", "'bfloat16'"),
}


@pytest.mark.parametrize(("argv", "where", "what"), USAGE_ERRORS.values(),
                         ids=USAGE_ERRORS.keys())
def test_a_usage_error_is_one_line_naming_the_command_the_problem_and_its_help(
    argv: list[str], where: str, what: str
) -> None:
    result = subprocess.run([TOOL, *argv], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {where}: "), line
    assert what in line, line
    assert line.endswith(f"run {where[:-1]} --help` to see what it takes"), line
