"""Writes the draft logit cache: the lookup and the `torch.full` allocation
in place of 0.27.1's `torch.zeros`, and the default hook right before
`_validate_local_argmax_reduction`; backwards, 0.27.1's allocation in its
layout, and the hook goes."""

from __future__ import annotations

import libcst as cst

from .judge import (
    BUFFER,
    DRAFT_LOGIT_CACHE,
    FULL_ALLOCATION,
    HOOK_METHOD,
    SPEC_LOOKUP,
    ZEROS_ALLOCATION,
    Allocation,
)
from ...framework.edit import Hunk, Site
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


class DraftLogitCache(Writer):
    EDIT = DRAFT_LOGIT_CACHE

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is HOOK_METHOD:
            return found.replaced(*placed_before(found.statement, [self.statement(hunk.after)]))
        assert hunk is BUFFER
        allocation = found.statement
        assert isinstance(allocation, cst.SimpleStatementLine)
        lookup, full = self.statements(SPEC_LOOKUP + FULL_ALLOCATION)
        # Comments above the allocation now introduce the pair; one at the
        # end of its line stays at the end of the allocation.
        return found.replaced(
            lookup.with_changes(leading_lines=allocation.leading_lines),
            full.with_changes(trailing_whitespace=allocation.trailing_whitespace),
        )

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is HOOK_METHOD:
            # The member after the hook takes back the blank lines it took.
            return found.with_siblings(removed(found.siblings, [found.statement]))
        assert hunk is BUFFER and isinstance(site, Allocation) and site.allocation
        lookup = found.statement
        allocation = locate(tree, site.allocation).statement
        assert isinstance(lookup, cst.SimpleStatementLine)
        assert isinstance(allocation, cst.SimpleStatementLine)
        (zeros,) = self.statements(ZEROS_ALLOCATION)
        # The forward split, undone: comments above the pair or between its
        # lines introduce the allocation again; one at the end of the
        # allocation stays there, one at the end of the lookup goes with it.
        statements = found.siblings
        at = found.position
        assert statements[at + 1] is allocation
        statements[at : at + 2] = [
            zeros.with_changes(
                leading_lines=[*lookup.leading_lines, *allocation.leading_lines],
                trailing_whitespace=allocation.trailing_whitespace,
            )
        ]
        return found.with_siblings(statements)
