"""Writes the scheduler's block-drop flag and its uses over 0.27.1's
statements, where the two differ (writers/rewrites.py); backwards, 0.27.1's."""

from __future__ import annotations

from ..prefix_block_drop import PREFIX_BLOCK_DROP
from .rewrites import StatementRunWriter


class PrefixBlockDrop(StatementRunWriter):
    EDIT = PREFIX_BLOCK_DROP
