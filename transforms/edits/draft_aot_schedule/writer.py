"""Writes the AOT-schedule loop after `super().set_attn(...)` and the import
it needs, by the difference between 0.27.1's statements and the fix's
(framework/writing/by_difference.py); backwards, 0.27.1's again."""

from __future__ import annotations

from .judge import DRAFT_AOT_SCHEDULE
from ...framework.writing.by_difference import StatementRunWriter


class DraftAotSchedule(StatementRunWriter):
    EDIT = DRAFT_AOT_SCHEDULE
