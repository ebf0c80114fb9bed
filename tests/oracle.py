"""The spec's result, as an oracle: on a pristine vLLM 0.27.1 it is what
`apply --only-pr` must write.

The spec's string patcher replaces fifteen blocks of text in seven files.
What it writes on a pristine 0.27.1 is kept here as a patch
(spec_pr_edits.diff), so the tests need nothing outside this repository:
`seed_patched` applies it to a copy of a tree, checking every context and
removed line as it goes. Where the spec is at hand,

    python -m tests.oracle PATH/TO/SPEC

runs its patcher on a pristine 0.27.1 again and writes the patch anew.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PATCH = Path(__file__).resolve().with_name("spec_pr_edits.diff")
HEADER_END = "\n\n"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def seed_patched(site: Path, scratch: Path) -> Path:
    """A copy of `site` (a pristine vLLM 0.27.1) with the spec's edits made."""
    copy = scratch / "seeded"
    shutil.copytree(site, copy)
    for relative, hunks in _files(PATCH.read_text()).items():
        path = copy / relative
        path.write_text(_applied(relative, path.read_text(), hunks))
    return copy


def closure_patched(site: Path, scratch: Path) -> Path:
    """The spec's result with the upstream fixes the tool carries made on
    top of it by `apply` (on it, only they are pending): what `apply` must
    leave on `site`, the fixes' edits being tested on their own
    (tests/transforms, tests/runtime)."""
    from typer.testing import CliRunner

    from dflash2_backport.cli.main import app

    seeded = seed_patched(site, scratch)
    result = CliRunner().invoke(app, ["apply", "--site-packages", str(seeded)])
    assert result.exit_code == 0, result.output
    return seeded


def _files(patch: str) -> dict[str, list[list[str]]]:
    """Each file's hunks, each hunk its lines, from a unified diff."""
    files: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("+++ b/"):
            current = files.setdefault(line[len("+++ b/"):].rstrip("\n"), [])
        elif line.startswith("--- "):
            continue
        elif line.startswith("@@"):
            assert current is not None, line
            current.append([line])
        elif current and current[-1]:
            current[-1].append(line)
    return files


def _applied(relative: str, text: str, hunks: list[list[str]]) -> str:
    """`text` with `hunks` applied where they say, each line they keep or
    remove checked against it."""
    lines = text.splitlines(keepends=True)
    result: list[str] = []
    at = 0
    for hunk in hunks:
        start = int(_HUNK.match(hunk[0]).group(1)) - 1
        assert start >= at, f"{relative}: hunks out of order"
        result.extend(lines[at:start])
        at = start
        for line in hunk[1:]:
            kind, body = line[0], line[1:]
            if kind in " -":
                assert lines[at] == body, (
                    f"{relative}:{at + 1}: expected {body!r}, found {lines[at]!r}"
                )
                at += 1
            if kind in " +":
                result.append(body)
    result.extend(lines[at:])
    return "".join(result)


def _write_from_spec(spec: Path) -> None:
    """Run the spec's patcher on a pristine 0.27.1 and write its result as the patch."""
    from tests.trees import TARGETS, make_site

    header = PATCH.read_text().split(HEADER_END, 1)[0] + HEADER_END
    with tempfile.TemporaryDirectory() as scratch:
        pristine = make_site("0.27.1", Path(scratch) / "pristine")
        seeded = shutil.copytree(pristine, Path(scratch) / "seeded")
        subprocess.run([sys.executable, str(spec / "seed_patch.py"), str(seeded)],
                       check=True, capture_output=True, cwd=spec)
        chunks = [header]
        for relative in TARGETS:
            before = (pristine / relative).read_text()
            after = (seeded / relative).read_text()
            chunks.extend(difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True),
                f"a/{relative}", f"b/{relative}",
            ))
    PATCH.write_text("".join(chunks))


if __name__ == "__main__":
    _write_from_spec(Path(sys.argv[1]))
