"""A report that cannot be printed changes nothing the command did.

Each case runs the command line as a shell runs it, with its standard output
or error going nowhere: a full disk, a closed descriptor, a reader that has
gone. The exit status is the command's own (`check`'s callers read 1 as
"pending"), there is never a traceback, and the tree is as the command left
it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels

FULL = "No space left on device"
LOST = (f"dflash2-backport: the report could not be written to standard output ({FULL}); "
        "the command's exit status still says how it ended")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return snapshot(make_site("0.27.1", tmp_path_factory.mktemp("pristine")))


def _tool(args: str, redirect: str) -> str:
    return f"{sys.executable} -m dflash2_backport {args} {redirect}"


# (command, where its output goes, the exit status, standard error, the tree
# it leaves: "pristine" or "applied")
CASES = [
    ("apply", "> /dev/full", 0, [LOST], "applied"),
    ("apply --json", ">&-", 0, [], "applied"),
    ("check", "> /dev/full", 1, [LOST], "pristine"),
    ("check --json", ">&-", 1, [], "pristine"),
    # The reader took what it wanted and left, as `head` does: nothing to say.
    ("check", "| head -c 1 > /dev/null", 1, [], "pristine"),
    ("check --json", "| head -c 1 > /dev/null", 1, [], "pristine"),
    ("check --root /nonexistent", "2> /dev/full", 2, None, "pristine"),
    ("check --root /nonexistent --json", ">&-", 2, [], "pristine"),
]


@pytest.mark.parametrize("args, redirect, code, stderr, left", CASES)
def test_a_report_that_cannot_be_printed_keeps_the_commands_exit_status(
    tmp_path: Path, pristine: dict[str, bytes], args: str, redirect: str, code: int,
    stderr: list[str] | None, left: str,
) -> None:
    site = tmp_path / "site"
    for relative, data in pristine.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    if "--root" not in args:
        args += f" --site-packages {site}"
    status = tmp_path / "status"
    script = f"{_tool(args, redirect)}; echo ${{PIPESTATUS[0]}} > {status}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert status.read_text().strip() == str(code), done.stderr
    assert "Traceback" not in done.stderr
    if stderr is not None:
        assert done.stderr.splitlines() == stderr
    assert (snapshot(site) != pristine) == (left == "applied")
