"""Writes the speculator selection: the DFlash2 `if` first in the dflash arm,
quoted as the arm's own test is; and, in VllmConfig, the forcing branch right
after the multi-KV-group one and `_is_dflash2_draft` right before
`_dflash_needs_multi_kv_group`. Backwards, each goes again."""

from __future__ import annotations

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import (
    BRANCH,
    DETECTION,
    DFLASH2_SELECTION,
    SPECULATOR_SELECTION,
    V2_RUNNER_FORCING,
    Arm,
)
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import Located, locate


def _with_arm_body(arm: Located, statements: list[cst.BaseStatement]) -> cst.Module:
    node = arm.node
    assert isinstance(node, cst.If) and isinstance(node.body, cst.IndentedBlock)
    return arm.replaced(node.with_changes(body=node.body.with_changes(body=statements)))


class SpeculatorSelection(Writer):
    EDIT = SPECULATOR_SELECTION

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Arm)
        arm = locate(tree, site.path)
        selection = self.statement(DFLASH2_SELECTION.replace('"', site.quote))
        return _with_arm_body(arm, [selection, *arm.node.body.body])  # type: ignore[attr-defined]

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        # The forward put the `if` first with no lines of its own above it and
        # left the rest of the arm as it was; lines above a DFlash2 `if`
        # written another way go with it.
        arm = locate(tree, site.path)
        return _with_arm_body(arm, list(arm.node.body.body[1:]))  # type: ignore[attr-defined]


class V2RunnerForcing(Writer):
    EDIT = V2_RUNNER_FORCING

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is BRANCH:  # right after the multi-KV-group branch
            return anchor.replaced(anchor.statement, self.statement(BRANCH.after))
        assert hunk is DETECTION
        return anchor.replaced(*placed_before(anchor.statement, [self.statement(DETECTION.after)]))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        found = locate(tree, site.path)
        if hunk is BRANCH:
            # The branch goes with the comment and blank line above it, which
            # the forward inserted with it; what follows kept its own.
            return found.replaced()
        # The member after the method takes back the blank lines it took.
        return found.with_siblings(removed(found.siblings, [found.statement]))
