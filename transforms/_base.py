"""What every backport codemod shares: per-hunk verdicts and the refusal they lead to.

A codemod owns one of the spec's edits in one file. For each of its hunks it
decides, by meaning and never by text, whether the spec's result is already
there (applied), whether the spec's anchor is there so the edit is safe
(pending), or neither (drift). Pending hunks are rewritten; any drift refuses
the whole edit with every drifted hunk named, and the engine then writes
nothing anywhere.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import libcst as cst
from libcst.codemod import Codemod, CodemodContext

from dflash2_backport.verdicts import HunkVerdict, State


class EditRefused(Exception):
    """A codemod found drift: the spec's result is absent and so is its anchor."""

    def __init__(self, edit: str, path: str, drifted: list[HunkVerdict]) -> None:
        self.edit = edit
        self.path = path
        self.drifted = drifted
        super().__init__(
            "; ".join(f"{path}: {edit}/{v.hunk}: {v.reason}" for v in drifted)
        )


class BackportCodemod(Codemod):
    """One spec edit as a codemod; subclasses implement `backport`."""

    #: Edit name as users see it (the spec's edit names).
    EDIT: ClassVar[str]
    #: Target file, relative to the directory that contains `vllm/`.
    PATH: ClassVar[str]
    #: One line: what the edit achieves.
    DESCRIPTION: ClassVar[str]

    def __init__(self, context: CodemodContext | None = None) -> None:
        super().__init__(context if context is not None else CodemodContext())
        self.verdicts: list[HunkVerdict] = []

    def transform_module(self, tree: cst.Module) -> cst.Module:
        # None of the edits needs metadata, and the base class would deep-copy
        # the whole module into a MetadataWrapper first: on vllm/config/vllm.py
        # that copy costs more than the edit itself.
        previous = self.context
        wrapper = cst.MetadataWrapper(tree, unsafe_skip_copy=True)
        self.context = replace(previous, wrapper=wrapper)
        try:
            return self.transform_module_impl(tree)
        finally:
            self.context = previous

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.verdicts = []
        result = self.backport(tree)
        drifted = [v for v in self.verdicts if v.state is State.DRIFT]
        if drifted:
            raise EditRefused(self.EDIT, self.PATH, drifted)
        return result

    def backport(self, tree: cst.Module) -> cst.Module:
        raise NotImplementedError

    # -- verdicts ---------------------------------------------------------

    def applied(self, hunk: str) -> None:
        self.verdicts.append(HunkVerdict(hunk, State.APPLIED))

    def pending(self, hunk: str) -> None:
        self.verdicts.append(HunkVerdict(hunk, State.PENDING))

    def drift(self, hunk: str, expected: str, found: str) -> None:
        self.verdicts.append(
            HunkVerdict(hunk, State.DRIFT, f"expected {expected}, found {found}")
        )

    # -- code generation --------------------------------------------------

    def statement(self, source: str) -> cst.BaseStatement:
        """Parse spec code with the target file's indentation and newlines."""
        return cst.parse_statement(source, config=self.module.config_for_parsing)

    def statements(self, source: str) -> list[cst.BaseStatement]:
        return list(
            cst.parse_module(source, config=self.module.config_for_parsing).body
        )
