"""Writes the live model length: 0.27.1's assignment out of `__init__`, by
the difference between the hunk's two runs (framework/writing/by_difference.py),
and the property right before `load_draft_model`; backwards, the property
goes, the member after it taking back its blank lines, and the assignment
comes back."""

from __future__ import annotations

import libcst as cst

from .judge import LIVE_MODEL_LEN, PROPERTY
from ...framework.edit import Hunk, Site
from ...framework.writing.by_difference import StatementRunWriter
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.resolve import locate


class LiveModelLen(StatementRunWriter):
    EDIT = LIVE_MODEL_LEN

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        if hunk is not PROPERTY:
            return super().forward(tree, hunk, site)
        anchor = locate(tree, site.path)
        return anchor.replaced(*placed_before(anchor.statement, [self.member(hunk.after)]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        if hunk is not PROPERTY:
            return super().backward(tree, hunk, site)
        found = locate(tree, site.path)
        return found.with_siblings(removed(found.siblings, [found.statement]))
