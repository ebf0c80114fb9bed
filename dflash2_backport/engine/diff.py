"""The patch of what a plan writes, for `--diff`.

It is a git-style patch of every file the command writes, the new modules
whole (`new file mode`) and removed ones too (`deleted file mode`), so that
`git apply` or `patch -p1` given it leaves the tree as the command would.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from ..utils.safe_files import decode_source

if TYPE_CHECKING:
    from ..engine.plan import Plan

# The mode git gives a regular file that is not executable, which is what
# the tool creates (it copies the mode of vllm/__init__.py).
_MODE = "100644"
_NO_NEWLINE = "\\ No newline at end of file\n"


def unified(plan: Plan, modules_whole: bool = True) -> str:
    """The patch of every change, in the order the commit writes them.
    `modules_whole` is what `--diff-modules` asked for before every new file
    was printed whole; it changes nothing now."""
    return "".join(_file_patch(c.path, c.before, c.after) for c in plan.changes)


def _file_patch(path: str, before: bytes | None, after: bytes | None) -> str:
    header = [f"diff --git a/{path} b/{path}\n"]
    if before is None:
        header.append(f"new file mode {_MODE}\n")
    elif after is None:
        header.append(f"deleted file mode {_MODE}\n")
    old, new = _lines(path, before), _lines(path, after)
    hunks = list(
        difflib.unified_diff(
            old,
            new,
            fromfile=f"a/{path}" if before is not None else "/dev/null",
            tofile=f"b/{path}" if after is not None else "/dev/null",
        )
    )
    return "".join(header + [_ended(line) for line in hunks])


def _ended(line: str) -> str:
    """A last line without its newline, marked as diff and patch mark it."""
    return line if line.endswith("\n") else f"{line}\n{_NO_NEWLINE}"


def _lines(path: str, data: bytes | None) -> list[str]:
    if data is None:
        return []
    return decode_source(path, data).splitlines(keepends=True)
