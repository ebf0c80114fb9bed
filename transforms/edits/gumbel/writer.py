"""Writes `gumbel_noised_argmax` right before `gumbel_block_argmax`, two
blank lines apart; backwards, the function goes and what followed it takes
back the blank lines it took."""

from __future__ import annotations

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import GUMBEL, Functions
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


class GumbelNoisedArgmax(Writer):
    EDIT = GUMBEL

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        new = self.statement(hunk.after)
        return anchor.replaced(*placed_before(anchor.statement, [new], blank_lines=2))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Functions)
        doomed = [locate(tree, path).statement for path in (site.path, *site.more)]
        return tree.with_changes(body=removed(tree.body, doomed))
