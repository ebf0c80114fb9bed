"""What the README tells a user to type does what it says.

Each recipe is taken from the README as written and run in a shell, with the
console script on PATH and HOME pointing at a scratch directory, so that a
path such as `~/src/vllm` lands there.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dflash2_backport.vllm_tree.installer import SHIPPED, shipped_source
from tests.vllm_tree.test_interpreter import TOOL
from tests.trees import make_site

pytestmark = pytest.mark.wheels

REPOSITORY = Path(__file__).resolve().parents[2]
README = (REPOSITORY / "README.md").read_text()


def code_block(containing: str) -> list[str]:
    """The lines of the README's indented code block that holds `containing`."""
    blocks = re.findall(r"(?:^(?: {4}.*)?\n)+", README, flags=re.MULTILINE)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"{len(found)} code blocks hold {containing!r}"
    return [line[4:] for line in found[0].splitlines() if line.strip()]


def git(repository: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         *args],
        check=True, capture_output=True,
    )


def fork_at(path: Path) -> Path:
    """A vLLM 0.27.1 source tree committed to git, as a fork has it."""
    tree = make_site("0.27.1", path)
    for dist_info in tree.glob("vllm-*.dist-info"):
        shutil.rmtree(dist_info)
    git(tree, "init", "--quiet")
    git(tree, "add", "--all")
    git(tree, "commit", "--quiet", "--message", "vLLM 0.27.1")
    return tree


def shell(home: Path, lines: list[str]) -> list[tuple[str, int, str]]:
    """Run `lines` one after the other in one shell; each line's exit status
    and stderr."""
    script = "\n".join(
        f'{line} 2>"$HOME/.err{i}"; echo "$?" >"$HOME/.status{i}"' for i, line in enumerate(lines)
    )
    environ = {**os.environ, "HOME": str(home),
               "PATH": f"{TOOL.parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", script], check=True, env=environ, cwd=home)
    return [
        (line, int((home / f".status{i}").read_text()), (home / f".err{i}").read_text())
        for i, line in enumerate(lines)
    ]


def _the_recipe_with_its_alternative(lines: list[str]) -> list[str]:
    """The recipe with the `# or: ...` alternative of a line in its place."""
    swapped = []
    for line in lines:
        command, _, comment = line.partition("#")
        alternative = re.match(r"\s*or:\s*(.+)", comment)
        swapped.append(alternative.group(1) if alternative else command)
    return swapped


RECIPES = {
    "as written": lambda lines: [line.partition("#")[0].rstrip() for line in lines],
    "with the alternative its comment gives": _the_recipe_with_its_alternative,
}


@pytest.mark.parametrize("variant", RECIPES.values(), ids=RECIPES.keys())
def test_the_patch_recipe_for_a_fork_leaves_nothing_to_do_and_the_modules_in_place(
    tmp_path: Path, variant
) -> None:
    lines = variant(code_block("git apply dflash2.patch"))
    (where,) = [line.split()[1] for line in lines if line.startswith("cd ")]
    fork = fork_at(tmp_path / where.replace("~/", ""))
    ran = shell(tmp_path, lines)
    # Saving the diff exits 1 (edits pending), as `check` does; every other
    # step succeeds.
    assert [status for _, status, _ in ran] == [0, 1, 0], ran
    done = subprocess.run([TOOL, "check", "--root", str(fork)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("nothing to do")
    for module in SHIPPED:
        assert (fork / module.dest).read_bytes() == shipped_source(module), module.dest


# -- the quick start: on the first screen, every number in it the tool's ---------


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README,
                      flags=re.MULTILINE | re.DOTALL)
    assert match, title
    return match.group(1)


def test_the_quick_start_is_on_the_first_screen_and_installs_checks_applies_and_verifies() -> None:
    (line,) = [i for i, text in enumerate(README.splitlines()) if text == "## Quick start"]
    assert line < 15, line
    text = section("Quick start")
    assert len(text.splitlines()) < 40
    for step in ("pip install", "dflash2-backport check", "dflash2-backport apply",
                 "dflash2-backport verify"):
        assert step in text, step


def _pending_on_a_pristine_tree(tmp_path: Path) -> tuple[int, str]:
    site = make_site("0.27.1", tmp_path / "site")
    done = subprocess.run([TOOL, "check", "--site-packages", str(site)],
                          capture_output=True, text=True)
    return done.returncode, done.stdout.splitlines()[-1]


def test_every_number_in_the_quick_start_is_what_the_tool_says(tmp_path: Path) -> None:
    from dflash2_backport.verification.verify import Check, Verification, render
    from dflash2_backport.vllm_tree.triage import FIRST_UPSTREAM
    from tests.runtime.env import VLLM_VERSIONS
    from tests.runtime.test_runtime_verify import CHECKS

    text = section("Quick start")
    opening = README.split("## Quick start")[0]
    checked: set[str] = set()

    supported = re.findall(r"\*\*(\d+\.\d+\.\d+)\*\*", opening)
    assert set(supported) == set(VLLM_VERSIONS)
    (upstream,) = re.findall(r"ships from (\d+\.\d+\.\d+)", opening)
    assert upstream == ".".join(map(str, FIRST_UPSTREAM))
    checked |= {*supported, upstream}

    code, summary = _pending_on_a_pristine_tree(tmp_path)
    (claim,) = re.findall(r"exit (\d+): (\d+) edits in (\d+) files and (\d+) new files pending",
                          text)
    said = re.match(r"pending: (\d+) edits in (\d+) files and (\d+) new files;", summary)
    assert said, summary
    assert claim == (str(code), *said.groups())
    checked |= set(claim)

    (checks, passing) = re.findall(r"(\d+) checks, on the CPU, .*; exit (\d+) when all pass",
                                   text)[0]
    assert int(checks) == len(CHECKS)
    everything_passes = Verification([Check(name, True, "") for name in CHECKS], "0.27.1",
                                     "/x", 1.0)
    with contextlib.redirect_stdout(io.StringIO()):
        assert str(render(everything_passes, "python", False)) == passing
    checked |= {checks, passing}

    (demo,) = re.findall(r"`make demo` patches vLLM\s+(\d+\.\d+\.\d+)", text)
    makefile = (REPOSITORY / "Makefile").read_text()
    assert re.search(rf"^VLLM_VERSION := {re.escape(demo)}$", makefile, flags=re.MULTILINE)
    checked.add(demo)

    # Digits in a name (DFlash2, dflash2-backport) are no figure.
    numbers = set(re.findall(r"(?<![\w.])\d+(?:\.\d+)*(?!\w)", opening + text))
    assert numbers <= checked, f"numbers no test checks: {numbers - checked}"


# -- what the README shows the tool printing ----------------------------------------


def _venv_at_opt_venv(tmp_path: Path) -> Path:
    """vLLM 0.27.1 in a venv at TMP/opt/venv, so that the tool's output,
    with TMP taken out, names /opt/venv/bin/python as the README does."""
    from tests.vllm_tree.test_interpreter import bare_venv

    python, site = bare_venv(tmp_path / "opt" / "venv")
    make_site("0.27.1", site)
    return python


def _readme_line(start: str) -> str:
    (line,) = [x.strip() for x in README.splitlines() if x.strip().startswith(start)]
    return line


def test_the_pending_line_the_readme_shows_is_what_check_prints(tmp_path: Path) -> None:
    python = _venv_at_opt_venv(tmp_path)
    done = subprocess.run([TOOL, "check", "--python", str(python)], capture_output=True,
                          text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    printed = done.stdout.splitlines()[-1].replace(str(tmp_path), "")
    assert _readme_line("pending: 23 edits") == printed


def test_the_other_edit_set_line_the_readme_shows_is_what_check_prints(tmp_path: Path) -> None:
    python = _venv_at_opt_venv(tmp_path)
    only_pr = subprocess.run([TOOL, "apply", "--only-pr", "--python", str(python)],
                             capture_output=True, text=True)
    assert only_pr.returncode == 0, only_pr.stdout + only_pr.stderr
    done = subprocess.run([TOOL, "check", "--python", str(python)], capture_output=True,
                          text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    printed = done.stdout.splitlines()[-1].replace(str(tmp_path), "")
    assert _readme_line("pending: this tree holds the DFlash2 PR's edits alone") == printed


def test_the_readme_gives_the_pre_commit_command_the_check_hook_names() -> None:
    from dflash2_backport.cli.main import PRE_COMMIT_FIX

    assert f"    {PRE_COMMIT_FIX}\n" in section("pre-commit, for a fork")


def test_the_readme_has_no_placeholder_left_to_fill() -> None:
    assert not re.findall(r"<[^>\n]*(?:URL|SHA|url)[^>\n]*>", README)
