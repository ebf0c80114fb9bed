"""Writes the DFlash2 factor right before `compute_hash` hashes its factors;
backwards, the `if` goes with its comment, and the hashing keeps its own
lines."""

from __future__ import annotations

import libcst as cst

from .judge import COMPILE_CACHE_KEY
from ...framework.edit import Hunk, Site
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


class CompileCacheKey(Writer):
    EDIT = COMPILE_CACHE_KEY

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        return anchor.replaced(self.statement(hunk.after), anchor.statement)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return locate(tree, site.path).replaced()
