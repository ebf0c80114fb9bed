"""Writes the DFlash2 factor right before `compute_hash` hashes its factors;
backwards, the `if` goes with its comment, and the hashing keeps its own
lines."""

from __future__ import annotations

import libcst as cst

from ..compile_cache_key import COMPILE_CACHE_KEY
from ..edit import Hunk, Site
from .protocol import Writer
from .resolve import locate


class CompileCacheKey(Writer):
    EDIT = COMPILE_CACHE_KEY

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        return anchor.replaced(self.statement(hunk.after), anchor.statement)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return locate(tree, site.path).replaced()
