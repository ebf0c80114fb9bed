"""Writes the DFlash2 grouped convolution kernel: the import lines where
isort puts them among the `from vllm...` imports, and the kernel's four
statements right before anchor-clamp's anchor, two blank lines apart;
backwards, each goes and what followed it takes back its blank lines."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ..draft_conv_kernel import DRAFT_CONV_KERNEL, IMPORTS_HUNK, KERNEL_HUNK, Imports, Statements
from ..edit import Hunk, Site
from .placement import is_one_of, leading_blank_lines, placed_before, removed
from .protocol import Writer
from .resolve import locate


class DraftConvKernel(Writer):
    EDIT = DRAFT_CONV_KERNEL

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        anchor = locate(tree, site.path)
        if hunk is IMPORTS_HUNK:
            assert isinstance(site, Imports)
            lines = self.statements("".join(line + "\n" for line in site.missing))
            if site.before:
                return anchor.replaced(*placed_before(anchor.statement, lines, blank_lines=0))
            return anchor.replaced(anchor.statement, *lines)
        assert hunk is KERNEL_HUNK
        new = self.statements(KERNEL_HUNK.after)
        return anchor.replaced(*placed_before(anchor.statement, new, blank_lines=2))

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Statements)
        doomed = [locate(tree, path).statement for path in (site.path, *site.more)]
        if hunk is IMPORTS_HUNK:
            return tree.with_changes(body=_without_imports(tree.body, doomed))
        return tree.with_changes(body=removed(tree.body, doomed))


def _without_imports(
    body: Sequence[cst.BaseStatement], doomed: Sequence[cst.CSTNode]
) -> list[cst.BaseStatement]:
    """The body less the import lines. Written before an import, they took
    its blank lines, which it keeps as well; written after the last one,
    they took none, and the next statement kept its own. So the statement
    after a removed run gets the more blank lines of the two."""
    kept: list[cst.BaseStatement] = []
    handed_back: list[cst.EmptyLine] | None = None
    for statement in body:
        if is_one_of(statement, doomed):
            if handed_back is None:
                handed_back = leading_blank_lines(statement.leading_lines)[0]
            continue
        if handed_back is not None:
            blank, own = leading_blank_lines(statement.leading_lines)
            widest = handed_back if len(handed_back) > len(blank) else blank
            statement = statement.with_changes(leading_lines=[*widest, *own])
            handed_back = None
        kept.append(statement)
    return kept
