"""Rewriting with libcst: each edit declaration's writer (`Edit.writer`
names it, in the edit's folder), and the whole file rewritten by them.

Only a command that rewrites a file imports this package, and with it
libcst: `check` judges with Python's parser alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import libcst as cst

from ..edit import Edit, Judged
from ..source import encoding_of
from ..vocabulary import Goal
from .jobs import parse_module, rewrite_order
from .protocol import EditRefused, Misjudged, Writer
from .regions import Regions, plan, rewrite_regions
from .resolve import SiteMoved

#: The package of the edits' folders.
_EDITS = __name__.rsplit(".", 2)[0] + ".edits"


def writer_for(edit: Edit) -> type[Writer]:
    """The writer class an edit declares, as "folder:Class": the class in the
    edit's folder's writer.py."""
    folder, name = edit.writer.split(":")
    writer = getattr(importlib.import_module(f"{_EDITS}.{folder}.writer"), name)
    assert issubclass(writer, Writer) and writer.EDIT is edit, edit.writer
    return writer


def rewritten(
    tree: cst.Module, judged: Sequence[tuple[Edit, dict[str, Judged]]], goal: Goal
) -> cst.Module:
    """`tree` with every hunk the goal rewrites rewritten, each in its
    edit's direction, where the judges found them, last in the file first."""
    for edit, hunk, site, direction in rewrite_order(judged, goal):
        tree = writer_for(edit)(direction=direction).rewrite(tree, hunk, site)
    return tree


class Unparsable(Exception):
    """libcst cannot parse a file that Python's parser can."""


def rewrite(
    data: bytes,
    judged: Sequence[tuple[Edit, dict[str, Judged]]],
    goal: Goal,
    regions: Regions | None = None,
) -> bytes:
    """A file's bytes rewritten as `rewritten` does, in the file's encoding:
    only its `regions` where they are given (see regions.py), else whole."""
    # Decoded here, not by libcst, which finds a cookie as tokenize does
    # (see `encoding_of`).
    encoding = encoding_of(data)
    text = data.decode(encoding)
    if regions is not None:
        patched = rewrite_regions(text, judged, goal, regions, writer_for)
        if patched is not None:
            return patched.encode(encoding)
    try:
        tree = parse_module(text)
    except cst.ParserSyntaxError as error:
        raise Unparsable(f"line {error.raw_line}: {error.message}") from None
    return rewritten(tree, judged, goal).code.encode(encoding)


__all__ = [
    "EditRefused",
    "Regions",
    "Misjudged",
    "SiteMoved",
    "Unparsable",
    "Writer",
    "plan",
    "rewrite",
    "rewritten",
    "writer_for",
]
