"""Writes the AOT-schedule loop after `super().set_attn(...)` and the import
it needs, by the difference between 0.27.1's statements and the fix's
(writers/rewrites.py); backwards, 0.27.1's again."""

from __future__ import annotations

import libcst as cst

from ..draft_aot_schedule import DRAFT_AOT_SCHEDULE
from ..edit import Hunk, Site
from .protocol import Writer
from .rewrites import rewritten_run


class DraftAotSchedule(Writer):
    EDIT = DRAFT_AOT_SCHEDULE

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.before, hunk.after)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert hunk.before is not None
        return rewritten_run(self, tree, site, hunk.after, hunk.before)
