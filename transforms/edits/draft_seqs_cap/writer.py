"""Writes the DFlash draft request cap: the method right before
`_set_max_num_scheduled_tokens`, its call right before that method's call
in `__post_init__`; backwards, each goes with the comment above it, and
what followed takes back its blank lines."""

from __future__ import annotations

import libcst as cst

from .judge import CALL, DRAFT_SEQS_CAP
from ...framework.edit import Hunk, Site
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


class DraftSeqsCap(Writer):
    EDIT = DRAFT_SEQS_CAP

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is CALL:
            return anchor.replaced(self.statement(hunk.after), anchor.statement)
        method = self.member(hunk.after)
        return anchor.replaced(*placed_before(anchor.statement, [method]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is CALL:
            return found.replaced()
        return found.with_siblings(removed(found.siblings, [found.statement]))
