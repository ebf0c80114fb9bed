"""Writes the vocabulary refusal: the method right before its anchor
method, and its call right after `self.try_verify_and_update_config()`;
backwards, each goes again."""

from __future__ import annotations

from ...framework.writing.method_and_call import MethodAndCall
from .judge import VOCABULARY_CALL, DRAFT_VOCABULARY


class DraftVocabulary(MethodAndCall):
    EDIT = DRAFT_VOCABULARY
    CALL = VOCABULARY_CALL
