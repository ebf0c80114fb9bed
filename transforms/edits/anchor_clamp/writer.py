"""Writes `dflash_anchors_in_vocab` right before its anchor
(`_get_dflash_fc_input_size`, or `_resolve_layer_attention` in vLLM 0.26.0),
two blank lines apart; backwards, the function goes and what followed it
takes back the blank lines it took."""

from __future__ import annotations

import libcst as cst

from .judge import ANCHOR_CLAMP
from ...framework.edit import Hunk, Site
from ..gumbel.judge import Functions
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


class AnchorClamp(Writer):
    EDIT = ANCHOR_CLAMP

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        new = self.statement(hunk.after)
        return anchor.replaced(*placed_before(anchor.statement, [new], blank_lines=2))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Functions)
        doomed = [locate(tree, path).statement for path in (site.path, *site.more)]
        return tree.with_changes(body=removed(tree.body, doomed))
