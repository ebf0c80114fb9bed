"""Writes the scheduler's block-drop flag and its uses over 0.27.1's
statements, where the two differ (framework/writing/by_difference.py); backwards, 0.27.1's."""

from __future__ import annotations

from .judge import PREFIX_BLOCK_DROP
from ...framework.writing.by_difference import StatementRunWriter


class PrefixBlockDrop(StatementRunWriter):
    EDIT = PREFIX_BLOCK_DROP
