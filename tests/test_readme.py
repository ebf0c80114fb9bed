"""What the README tells a user to type does what it says.

Each recipe is taken from the README as written and run in a shell, with the
console script on PATH and HOME pointing at a scratch directory, so that a
path such as `~/src/vllm` lands there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dflash2_backport.installer import SHIPPED, shipped_source
from tests.test_interpreter import TOOL
from tests.trees import make_site

pytestmark = pytest.mark.wheels

REPOSITORY = Path(__file__).resolve().parent.parent
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
