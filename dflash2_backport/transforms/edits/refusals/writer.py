"""Writes the refusals: each method right before its anchor method and its
call next to `self.try_verify_and_update_config()`, and the Speculators
refusals right before the statements they guard; backwards, each goes again
with the comment above it, and what followed takes back its blank lines."""

from __future__ import annotations

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import (
    DRAFT_VOCABULARY,
    QUANTIZED_CALL,
    QUANTIZED_DRAFT,
    SPECULATORS_FORMAT,
    VOCABULARY_CALL,
)
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate

#: The calls that go right before their anchor; the others go right after.
_BEFORE = (QUANTIZED_CALL,)


class _MethodAndCall:
    """A method before its anchor method, and a call beside the anchor call
    (the writers below are this and a `Writer`)."""

    CALLS: tuple[Hunk, ...] = ()

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk in self.CALLS:
            call = self.statement(hunk.after)  # type: ignore[attr-defined]
            if hunk in _BEFORE:
                return anchor.replaced(call, anchor.statement)
            return anchor.replaced(anchor.statement, call)
        method = self.member(hunk.after)  # type: ignore[attr-defined]
        return anchor.replaced(*placed_before(anchor.statement, [method]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk in self.CALLS:
            return found.replaced()
        # The member after the method takes back the blank lines it took.
        return found.with_siblings(removed(found.siblings, [found.statement]))


class QuantizedDraft(_MethodAndCall, Writer):
    EDIT = QUANTIZED_DRAFT
    CALLS = (QUANTIZED_CALL,)


class DraftVocabulary(_MethodAndCall, Writer):
    EDIT = DRAFT_VOCABULARY
    CALLS = (VOCABULARY_CALL,)


class SpeculatorsFormat(Writer):
    EDIT = SPECULATORS_FORMAT

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        return anchor.replaced(self.statement("\n" + hunk.after), anchor.statement)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        return locate(tree, site.path).replaced()
