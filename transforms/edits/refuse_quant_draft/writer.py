"""Writes the quantized-draft refusal: the method right before its anchor
method, and its call right before `self.try_verify_and_update_config()`;
backwards, each goes again."""

from __future__ import annotations

from ...framework.writing.method_and_call import MethodAndCall
from .judge import QUANTIZED_CALL, QUANTIZED_DRAFT


class QuantizedDraft(MethodAndCall):
    EDIT = QUANTIZED_DRAFT
    CALL = QUANTIZED_CALL
    CALL_BEFORE = True
