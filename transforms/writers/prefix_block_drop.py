"""Writes the scheduler's block-drop flag and its uses over 0.27.1's
statements, where the two differ (writers/rewrites.py); backwards, 0.27.1's."""

from __future__ import annotations

import libcst as cst

from ..prefix_block_drop import PREFIX_BLOCK_DROP
from ..edit import Hunk, Site
from .protocol import Writer
from .rewrites import rewritten_run


class PrefixBlockDrop(Writer):
    EDIT = PREFIX_BLOCK_DROP

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.before, hunk.after)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.after, hunk.before)
