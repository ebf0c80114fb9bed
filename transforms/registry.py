"""Edit 3, registry: `DFlash2DraftModel` resolves to the new module.

Target: the model table's entry
    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")
Inserts, right after it:
    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")

Why: without the entry vLLM rejects a DFlash2 checkpoint outright
("Model architectures ['DFlash2DraftModel'] are not supported").

The entry is judged by its value, not by its name appearing somewhere: a
comment that mentions `DFlash2DraftModel` does not count as applied, and an
entry that maps it elsewhere is a conflict, not "done".
"""

from __future__ import annotations

import libcst as cst

from ._base import BackportCodemod, Judged, applied, drift, exactly_one, pending
from ._meaning import describe, same_meaning, string_value
from .hunks import (
    ANCHOR_KEY,
    ANCHOR_VALUE,
    ENTRY_KEY,
    ENTRY_VALUE,
    REGISTRY,
)

(HUNK,) = REGISTRY.hunks


def _is_entry(element: cst.BaseDictElement, key: str) -> bool:
    return isinstance(element, cst.DictElement) and string_value(element.key) == key


def _module_level_tables(tree: cst.Module) -> list[tuple[cst.BaseStatement, cst.Dict]]:
    """Each module-level `NAME = {...}` statement with its dict literal."""
    tables = []
    for statement in tree.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            (small,) = statement.body
            if isinstance(small, cst.Assign | cst.AnnAssign) and isinstance(
                small.value, cst.Dict
            ):
                tables.append((statement, small.value))
    return tables


def _without_entry(table: cst.Dict) -> list[cst.BaseDictElement]:
    """The table's elements less the DFlash2 entry, separators put back as
    `_split_comma` found them: the entry before it takes over its ending."""
    elements = list(table.elements)
    index = next(
        i
        for i, e in enumerate(elements)
        if isinstance(e, cst.DictElement) and string_value(e.key) == ENTRY_KEY
    )
    entry = elements.pop(index)
    if index == 0:
        return elements
    previous = elements[index - 1]
    if index == len(elements):  # the entry closed the table
        elements[index - 1] = previous.with_changes(comma=entry.comma)
        return elements
    before, after = previous.comma, entry.comma
    if isinstance(before, cst.Comma) and isinstance(after, cst.Comma):
        kept, moved = before.whitespace_after, after.whitespace_after
        if isinstance(kept, cst.ParenthesizedWhitespace) and isinstance(
            moved, cst.ParenthesizedWhitespace
        ):
            # Comments and blank lines that stood before the next entry stay.
            empty_lines = (*kept.empty_lines, *moved.empty_lines)
            elements[index - 1] = previous.with_changes(
                comma=before.with_changes(
                    whitespace_after=kept.with_changes(empty_lines=empty_lines)
                )
            )
    return elements


class RegistryEntry(BackportCodemod):
    SPEC = REGISTRY

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        return {HUNK.name: self._judge(tree)}

    def _judge(self, tree: cst.Module) -> Judged:
        # vLLM's model tables are module-level dict literals; looking only
        # there keeps this edit from walking the whole 1500-line file.
        all_tables = _module_level_tables(tree)
        found = exactly_one(
            [
                (s, t)
                for s, t in all_tables
                if any(_is_entry(e, ANCHOR_KEY) for e in t.elements)
            ],
            f"one model table with a {ANCHOR_KEY!r} entry",
        )
        if isinstance(found, Judged):
            return found
        statement, table = found

        entries = [
            element
            for _, other in all_tables
            for element in other.elements
            if _is_entry(element, ENTRY_KEY)
        ]
        for entry in entries:
            assert isinstance(entry, cst.DictElement)
            if not same_meaning(entry.value, ENTRY_VALUE):
                return drift(
                    f"{ENTRY_KEY!r} to map to {ENTRY_VALUE}",
                    f"it maps to {describe(entry.value)}; remove that entry or "
                    "point it at the backport",
                )
        if entries:
            if any(e in table.elements for e in entries):
                return applied((statement, table))
            return drift(
                f"{ENTRY_KEY!r} in the table that holds {ANCHOR_KEY!r}",
                "it in another table",
            )

        index, anchor = next(
            (i, e) for i, e in enumerate(table.elements) if _is_entry(e, ANCHOR_KEY)
        )
        assert isinstance(anchor, cst.DictElement)
        if not same_meaning(anchor.value, ANCHOR_VALUE):
            return drift(
                f"{ANCHOR_KEY!r} to map to {ANCHOR_VALUE}",
                f"it maps to {describe(anchor.value)}",
            )
        return pending((statement, table))

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        """The entry right after the anchor, written as the anchor is: same
        quotes, the anchor's line ending handed on (see `_split_comma`)."""
        statement, table = sites[HUNK.name]
        index, anchor = next(
            (i, e) for i, e in enumerate(table.elements) if _is_entry(e, ANCHOR_KEY)
        )
        elements = list(table.elements)
        anchor_comma, entry_comma = self._split_comma(table, index)
        quote = anchor.key.quote if isinstance(anchor.key, cst.SimpleString) else '"'
        new_entry = anchor.with_changes(
            key=cst.SimpleString(f"{quote}{ENTRY_KEY}{quote}"),
            value=cst.parse_expression(
                ENTRY_VALUE.replace('"', quote), config=tree.config_for_parsing
            ),
            comma=entry_comma,
        )
        elements[index] = anchor.with_changes(comma=anchor_comma)
        elements.insert(index + 1, new_entry)
        return self._replace(tree, statement, table, elements)

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        statement, table = sites[HUNK.name]
        return self._replace(tree, statement, table, _without_entry(table))

    @staticmethod
    def _replace(
        tree: cst.Module,
        statement: cst.BaseStatement,
        table: cst.Dict,
        elements: list[cst.BaseDictElement],
    ) -> cst.Module:
        patched = statement.deep_replace(table, table.with_changes(elements=elements))
        return tree.with_changes(
            body=[patched if s is statement else s for s in tree.body]
        )

    @staticmethod
    def _split_comma(
        table: cst.Dict, index: int
    ) -> tuple[cst.Comma, cst.Comma | cst.MaybeSentinel]:
        """Commas for the anchor and for the entry inserted after it.

        The anchor keeps its own line ending (and any comment on it); the new
        entry gets what used to separate the anchor from whatever followed it.
        """
        elements = table.elements
        comma = elements[index].comma
        is_last = index == len(elements) - 1
        if is_last:
            # The anchor closes the table: separate it the way the entry
            # before it is separated from it, and hand its own ending (a
            # trailing comma or none) to the new last entry.
            previous = elements[index - 1].comma if index else None
            if isinstance(previous, cst.Comma):
                return previous, comma
            opening = table.lbrace.whitespace_after
            if isinstance(opening, cst.ParenthesizedWhitespace):
                line_break = opening.with_changes(
                    first_line=cst.TrailingWhitespace(), empty_lines=()
                )
                return cst.Comma(whitespace_after=line_break), comma
            return cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), comma
        assert isinstance(comma, cst.Comma)
        after = comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):
            anchor_comma = comma.with_changes(
                whitespace_after=after.with_changes(empty_lines=())
            )
            entry_comma = comma.with_changes(
                whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace())
            )
            return anchor_comma, entry_comma
        return comma, comma
