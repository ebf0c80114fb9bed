"""Writes the draft-keys refusal: the method right before
`_validate_v2_model_runner`, and its call right after
`self._maybe_disable_dynamic_sd_for_data_parallel()`; backwards, each goes
again."""

from __future__ import annotations

from ...framework.writing.method_and_call import MethodAndCall
from .judge import CALL, DRAFT_KEYS


class DraftKeys(MethodAndCall):
    EDIT = DRAFT_KEYS
    CALL = CALL
