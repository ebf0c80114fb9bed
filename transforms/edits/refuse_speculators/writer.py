"""Writes the Speculators refusals right before the statements they guard;
backwards, each goes again with the comment above it."""

from __future__ import annotations

import libcst as cst

from ...framework.edit import Hunk, Site
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate
from .judge import SPECULATORS_FORMAT


class SpeculatorsFormat(Writer):
    EDIT = SPECULATORS_FORMAT

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        return anchor.replaced(self.statement("\n" + hunk.after), anchor.statement)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return locate(tree, site.path).replaced()
