"""Writes the draft config's top-level keys: each of 0.27.1's statements
rewritten into the fix's, by their difference
(framework/writing/by_difference.py); backwards, 0.27.1's again."""

from __future__ import annotations

from .judge import DRAFTER_KEYS
from ...framework.writing.by_difference import StatementRunWriter


class DrafterKeys(StatementRunWriter):
    EDIT = DRAFTER_KEYS
