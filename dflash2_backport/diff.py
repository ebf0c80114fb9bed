"""The unified diff of what a plan writes, for `--diff`."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from .layout import MODULE_FILES
from .safe_files import decode_source

if TYPE_CHECKING:
    from .engine import Plan


def unified(plan: Plan, modules_whole: bool = False) -> str:
    """The unified diff of every change. The new modules are hundreds of
    lines the user did not write and cannot review against anything, so
    unless `modules_whole`, each is one comment line after the diff, which
    `patch` and `git apply` skip."""
    chunks, summaries = [], []
    for change in plan.changes:
        if change.path in MODULE_FILES and not modules_whole:
            data = change.after if change.after is not None else change.before
            lines = len(_lines(change.path, data))
            what = "new file" if change.after is not None else "removed"
            summaries.append(f"# {change.path}: {what}, {lines} lines (--diff-modules shows it)\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                _lines(change.path, change.before),
                _lines(change.path, change.after),
                fromfile=f"a/{change.path}" if change.before is not None else "/dev/null",
                tofile=f"b/{change.path}" if change.after is not None else "/dev/null",
            )
        )
    return "".join(chunks + summaries)


def _lines(path: str, data: bytes | None) -> list[str]:
    if data is None:
        return []
    return decode_source(path, data).splitlines(keepends=True)
