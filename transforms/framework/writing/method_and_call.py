"""Writes a `VllmConfig` method right before its anchor method and its call
beside the anchor call; backwards, each goes again, and the member after
the method takes back the blank lines it took."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from ..edit import Hunk, Site
from .placement import placed_before, removed
from .protocol import Writer
from .resolve import locate


class MethodAndCall(Writer):
    """A method and its call; `CALL` is the call's hunk, `CALL_BEFORE`
    whether it goes right before the anchor call (else right after)."""

    CALL: ClassVar[Hunk]
    CALL_BEFORE: ClassVar[bool] = False

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is self.CALL:
            call = self.statement(hunk.after)
            if self.CALL_BEFORE:
                return anchor.replaced(call, anchor.statement)
            return anchor.replaced(anchor.statement, call)
        method = self.member(hunk.after)
        return anchor.replaced(*placed_before(anchor.statement, [method]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is self.CALL:
            return found.replaced()
        return found.with_siblings(removed(found.siblings, [found.statement]))
