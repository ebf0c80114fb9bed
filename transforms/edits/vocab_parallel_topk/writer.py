"""Writes the vocab-parallel top-k: the imports before `import torch`, the
`has_flashinfer` import after the `current_platform` one and the helpers
after that import block, and the method before `extra_repr`; backwards, each
goes again, the code around it taking back its blank lines."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ...framework.edit import Hunk, Site
from .judge import (
    GET_TOP_K_TOKENS,
    HELPERS_HUNK,
    IMPORTS,
    IMPORTS_HUNK,
    METHOD_HUNK,
    VOCAB_PARALLEL_TOPK,
    Helpers,
    Imports,
    Removal,
)
from ...framework.writing.placement import is_one_of, leading_blank_lines, placed_before, removed, with_blank_lines
from ...framework.writing.protocol import Writer
from ...framework.writing.resolve import locate


def _is_import_line(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and bool(statement.body)
        and all(isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body)
    )


class VocabParallelTopK(Writer):
    EDIT = VOCAB_PARALLEL_TOPK

    def forward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        if hunk is IMPORTS_HUNK:
            assert isinstance(site, Imports)
            torch = locate(tree, site.path)
            lines = "".join(IMPORTS[name][1] + "\n" for name in site.missing)
            return torch.replaced(*placed_before(torch.statement, self.statements(lines)))
        if hunk is HELPERS_HUNK:
            assert isinstance(site, Helpers)
            return self._with_helpers(tree, site)
        assert hunk is METHOD_HUNK
        anchor = locate(tree, site.path)
        wrapper = self.statement("class _:\n" + GET_TOP_K_TOKENS)
        assert isinstance(wrapper, cst.ClassDef)
        (method,) = wrapper.body.body
        return anchor.replaced(*placed_before(anchor.statement, [method]))

    def _with_helpers(self, tree: cst.Module, site: Helpers) -> cst.Module:
        anchor = locate(tree, site.path).position
        last_import = locate(tree, site.last_import).position
        import_line, *helpers = self.statements(HELPERS_HUNK.after)
        body = list(tree.body)
        following = last_import + 1
        if following < len(body):
            # PEP 8 wants two blank lines after a top-level definition.
            body[following] = with_blank_lines(body[following], at_least=2)
        body[following:following] = helpers
        if site.import_has_flashinfer:
            body.insert(anchor + 1, import_line)
        return tree.with_changes(body=body)

    def backward(self, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
        assert isinstance(site, Removal)
        found = [locate(tree, path) for path in (site.path, *site.more)]
        doomed = [f.statement for f in found]
        if hunk is METHOD_HUNK:
            # The method goes, and the member after it takes back the blank
            # lines the method took from it.
            return found[0].with_siblings(removed(found[0].siblings, doomed))
        if hunk is IMPORTS_HUNK:
            return tree.with_changes(body=removed(tree.body, doomed))
        assert hunk is HELPERS_HUNK
        return tree.with_changes(body=_without_helpers(tree.body, doomed))


def _without_helpers(
    body: Sequence[cst.BaseStatement], doomed: Sequence[cst.CSTNode]
) -> list[cst.BaseStatement]:
    """The module body less the helpers and their import, as before they came.

    The forward leaves what follows the helpers as it was, except that it
    gives it two blank lines when it had fewer. Where it now follows the
    import block again, it gets back the blank lines isort's convention puts
    there: two before a def or class (kept), one before anything else.
    """
    kept: list[cst.BaseStatement] = []
    after_removed = False
    for statement in body:
        if is_one_of(statement, doomed):
            after_removed = True
            continue
        if after_removed and kept and _is_import_line(kept[-1]):
            statement = _after_import_block(statement)
        after_removed = False
        kept.append(statement)
    return kept


def _after_import_block(statement: cst.BaseStatement) -> cst.BaseStatement:
    """The statement with isort's spacing after an import block, where the
    forward's two blank lines may stand for fewer: one before anything but a
    def or class."""
    if isinstance(statement, cst.FunctionDef | cst.ClassDef):
        return statement
    blank, own = leading_blank_lines(statement.leading_lines)
    if len(blank) != 2:
        return statement
    return statement.with_changes(leading_lines=[blank[0], *own])
