"""Writes the hardened prepare-inputs kernel over 0.27.1's, statement by
statement where the two differ (writers/rewrites.py); backwards, 0.27.1's."""

from __future__ import annotations

from ..dflash_input_guards import DFLASH_INPUT_GUARDS
from .rewrites import StatementRunWriter


class DFlashInputGuards(StatementRunWriter):
    EDIT = DFLASH_INPUT_GUARDS
