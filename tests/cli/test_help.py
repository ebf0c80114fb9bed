"""What a first look at the command shows: --version, and help that says what
each option takes and defaults to."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dflash2_backport import __version__
from dflash2_backport.vllm_tree.locate import is_editable

TOOL = Path(sys.executable).with_name("dflash2-backport")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOL), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "TERM": "dumb"})


def test_version_prints_the_packages_version() -> None:
    # And the commit, where it is known (tests/packaging/test_tool_version.py).
    result = run("--version")
    assert result.returncode == 0
    assert re.fullmatch(
        rf"dflash2-backport {re.escape(__version__)}"
        r"( \(commit [0-9a-f]{40}(, with uncommitted changes)?\))?\n",
        result.stdout,
    ), result.stdout
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


@pytest.mark.parametrize("command", ["check", "apply", "revert", "verify"])
def test_help_names_what_options_take_and_never_calls_a_flag_bool(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout
    assert "--python PATH" in result.stdout
    # Wrapped where the widest option puts the column, which varies by command.
    assert "[default: the interpreter running this tool]" in " ".join(result.stdout.split())
    if command != "verify":
        assert "--site-packages PATH" in result.stdout
        assert "--root PATH" in result.stdout
        assert re.search(r"^\s+--diff\s+print", result.stdout, flags=re.MULTILINE)


# What each command does to the vLLM an option names, in the command's words.
VERBS = {"apply": "patch", "check": "check", "revert": "revert", "verify": "verify"}


def option_help(text: str, option: str) -> str | None:
    """The help of `option`, its lines joined; None when the command has none."""
    match = re.search(rf"^  {option}\b(.*?)(?=^  -|\Z)", text, flags=re.MULTILINE | re.DOTALL)
    return " ".join(match.group(1).split()) if match else None


@pytest.mark.parametrize("command", VERBS)
def test_each_commands_help_says_what_that_command_does_and_no_other(command: str) -> None:
    text = run(command, "--help").stdout
    shown = {option: option_help(text, option) for option in ("--python", "--force")}
    assert shown["--python"] is not None
    assert (shown["--force"] is None) == (command == "verify")
    for option, words in shown.items():
        if words is None:
            continue
        used = {verb for verb in VERBS.values() if re.search(rf"\b{verb}\b", words)}
        assert used == {VERBS[command]}, f"{command} {option}: {words}"


def test_top_level_help_lists_every_command() -> None:
    result = run("--help")
    assert result.returncode == 0
    commands = re.findall(r"^  (\w+)\s{2,}", result.stdout.split("Commands:")[1], re.MULTILINE)
    assert commands == ["apply", "check", "revert", "verify"]



def _releases_named(text: str) -> set[str]:
    return set(re.findall(r"\b0\.\d+\.\d+\b", text))


def test_top_level_help_and_the_package_description_name_every_supported_release() -> None:
    import tomllib

    from tests.runtime.env import VLLM_VERSIONS

    help_text = " ".join(run("--help").stdout.split())
    assert _releases_named(help_text) == set(VLLM_VERSIONS), help_text
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                            .read_text())["project"]
    assert _releases_named(project["description"]) == set(VLLM_VERSIONS), project["description"]

DIRECT_URLS = {
    "editable directory": ('{"url": "file:///src/vllm", "dir_info": {"editable": true}}', True),
    "plain directory": ('{"url": "file:///src/vllm", "dir_info": {}}', False),
    "editable false": ('{"url": "file:///src/vllm", "dir_info": {"editable": false}}', False),
    "editable as a string": ('{"url": "file:///x", "dir_info": {"editable": "true"}}', False),
    "a wheel from an index": ('{"url": "https://x/vllm.whl", "archive_info": {}}', False),
    "not JSON": ("{", False),
    "none": (None, False),
}


@pytest.mark.parametrize(("text", "editable"), DIRECT_URLS.values(), ids=DIRECT_URLS.keys())
def test_only_pep_610_editable_true_counts_as_an_editable_install(text, editable) -> None:
    assert is_editable(text) is editable


class Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


COLOUR_CASES = {
    "terminal": (True, {}, "\033[32mpass\033[0m  "),
    "terminal, NO_COLOR set": (True, {"NO_COLOR": "1"}, "pass  "),
    "terminal, NO_COLOR empty": (True, {"NO_COLOR": ""}, "\033[32mpass\033[0m  "),
    "dumb terminal": (True, {"TERM": "dumb"}, "pass  "),
    "pipe": (False, {}, "pass  "),
}


@pytest.mark.parametrize(("tty", "environ", "shown"), COLOUR_CASES.values(),
                         ids=COLOUR_CASES.keys())
def test_state_words_are_coloured_only_on_a_terminal_without_no_color(
    monkeypatch: pytest.MonkeyPatch, tty: bool, environ: dict, shown: str
) -> None:
    from dflash2_backport.utils.style import paint

    for name in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert paint("pass", Stream(tty), 6) == shown
    assert paint("FAIL", Stream(tty), 6).startswith("\033[31m" if shown != "pass  " else "FAIL")
