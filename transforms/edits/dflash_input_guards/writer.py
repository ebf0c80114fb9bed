"""Writes the hardened prepare-inputs kernel over 0.27.1's, statement by
statement where the two differ (framework/writing/by_difference.py); backwards, 0.27.1's."""

from __future__ import annotations

from .judge import DFLASH_INPUT_GUARDS
from ...framework.writing.by_difference import StatementRunWriter


class DFlashInputGuards(StatementRunWriter):
    EDIT = DFLASH_INPUT_GUARDS
