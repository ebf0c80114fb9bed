"""Writes the hardened prepare-inputs kernel over 0.27.1's, statement by
statement where the two differ (writers/rewrites.py); backwards, 0.27.1's."""

from __future__ import annotations

import libcst as cst

from ..dflash_input_guards import DFLASH_INPUT_GUARDS
from ..edit import Hunk, Site
from .protocol import Writer
from .rewrites import rewritten_run


class DFlashInputGuards(Writer):
    EDIT = DFLASH_INPUT_GUARDS

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.before, hunk.after)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.after, hunk.before)
