"""What a rewrite runs over: a file's libcst tree, and the hunks the goal
rewrites in the order they are rewritten.

The writers' interface (protocol.py), the regions (regions.py) and the
whole-file rewrite (the package) all take these from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ..edit import Edit, Hunk, Judged, Site
from ..source import BLOCKS
from ..vocabulary import Direction, Goal


def parse_module(text: str) -> cst.Module:
    """libcst's tree of a file or of part of one, printing back as `text`.

    libcst's parser takes a text that ends in a bare CR (a file whose lines
    end in CR alone) for one without a final newline, and prints it back
    without it: the file would lose its last newline, and a region
    (regions.py) the one between its last line and the next.
    """
    tree = cst.parse_module(text)
    if text.endswith("\r") and not tree.has_trailing_newline:
        return tree.with_changes(has_trailing_newline=True)
    return tree


def order(site: Site) -> tuple:
    """Where a site is in the file: hunks are rewritten from the last to the
    first, so that no rewrite moves a statement a later one goes to."""
    return tuple((BLOCKS.index(step.field), step.index) for step in site.path)


def rewrite_order(
    judged: Sequence[tuple[Edit, dict[str, Judged]]], goal: Goal
) -> list[tuple[Edit, Hunk, Site, Direction]]:
    """The hunks the goal rewrites, each with its edit's direction, last in
    the file first (whatever their directions: a rewrite moves only what
    follows it)."""
    jobs = []
    for edit, hunks in judged:
        direction = goal.of(edit)
        for hunk in edit.hunks:
            found = hunks[hunk.name]
            if found.state is direction.rewrites and found.site is not None:
                jobs.append((edit, hunk, found.site, direction))
    return sorted(jobs, key=lambda job: order(job[2]), reverse=True)  # type: ignore[arg-type]
