"""Writes the DFlash2 grouped convolution kernel: the import lines where
isort puts them among the `from vllm...` imports, and the kernel's four
statements right before anchor-clamp's anchor, two blank lines apart;
backwards, each goes and what followed it takes back its blank lines."""

from __future__ import annotations

import libcst as cst

from .judge import DRAFT_CONV_KERNEL, IMPORTS_HUNK, KERNEL_HUNK, Imports, Statements
from ...framework.edit import Hunk, Site
from ...framework.writing.placement import placed_before, removed
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


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
        # Imports written after the last one took no blank lines from what
        # follows them: it keeps its own.
        widest = hunk is IMPORTS_HUNK
        return tree.with_changes(body=removed(tree.body, doomed, widest=widest))
