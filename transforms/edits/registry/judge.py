"""Edit 3, registry: `DFlash2DraftModel` resolves to the new module.

Target: the model table's entry
    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")
Inserts, right after it:
    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")

Why: without the entry vLLM rejects a DFlash2 checkpoint outright
("Model architectures ['DFlash2DraftModel'] are not supported").

The entry is judged by its value, not by its name appearing somewhere: a
comment that mentions `DFlash2DraftModel` does not count as applied, an
entry that maps it elsewhere is a conflict, not "done", and so is one in
another table or a second one.
"""

from __future__ import annotations

import ast
import dataclasses

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles
from ...framework.meaning import same_meaning
from ...framework.source import Found, Source, shares_a_line

#: The table's excerpt as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
_NAME = "DFlash2DraftModel entry"


def _entries(code: str) -> dict[str, str]:
    """An excerpt's entries: each key, and its value as the code writes it."""
    (assignment,) = ast.parse(code).body
    assert isinstance(assignment, ast.Assign) and isinstance(assignment.value, ast.Dict)
    table = assignment.value
    return {
        key.value: ast.get_source_segment(code, value) or ""
        for key, value in zip(table.keys, table.values)
        if isinstance(key, ast.Constant)
    }


#: The entry the edit's entry follows, and the edit's entry.
((ANCHOR_KEY, ANCHOR_VALUE),) = _entries(HUNKS.shipped(_NAME)).items()
((ENTRY_KEY, ENTRY_VALUE),) = (
    (key, value) for key, value in _entries(HUNKS.patched(_NAME)).items() if key != ANCHOR_KEY
)

HUNK = Hunk(
    _NAME,
    f"the module-level model table with the {ANCHOR_KEY!r} entry, right after that entry",
    None,
    f'"{ENTRY_KEY}": {ENTRY_VALUE}',
    "`DFlash2DraftModel` resolves to the new module; without it vLLM rejects "
    "the checkpoint.",
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Entry(Site):
    """The table's statement; the anchor's position among its entries
    (pending) or the DFlash2 entry's (applied); the quote the anchor's key
    is written with."""

    within = True

    element: int
    quote: str = '"'


def _keyed(table: ast.Dict, key: str) -> list[int]:
    return [
        i
        for i, k in enumerate(table.keys)
        if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value == key
    ]


def _tables(source: Source) -> list[tuple[Found, ast.Dict]]:
    """Each module-level `NAME = {...}` statement, on a line of its own, with
    its dict literal. vLLM's model tables are such literals; looking only
    there keeps this edit from walking the whole 1500-line file."""
    body = source.tree.body
    return [
        (found, found.node.value)  # type: ignore[attr-defined]
        for i, found in enumerate(source.module.statements())
        if isinstance(found.node, ast.Assign | ast.AnnAssign)
        and isinstance(found.node.value, ast.Dict)
        and not shares_a_line(body, i)
    ]


def judge(source: Source) -> dict[str, Judged]:
    return {HUNK.name: _judge(source)}


def _judge(source: Source) -> Judged:
    tables = _tables(source)
    found = exactly_one(
        [(s, t) for s, t in tables if _keyed(t, ANCHOR_KEY)],
        f"one model table with a {ANCHOR_KEY!r} entry",
    )
    if isinstance(found, Judged):
        return found
    statement, table = found

    entries = [(other, i) for _, other in tables for i in _keyed(other, ENTRY_KEY)]
    for other, i in entries:
        value = other.values[i]
        if not same_meaning(value, ENTRY_VALUE):
            return drift(
                f"{ENTRY_KEY!r} to map to {ENTRY_VALUE}",
                f"it maps to {source.describe(value)}; remove that entry or point it "
                "at the backport",
            )
    if len(entries) > 1:
        return drift(f"one {ENTRY_KEY!r} entry", f"{len(entries)}; remove all but one")
    if entries:
        ((other, i),) = entries
        if other is not table:
            return drift(
                f"{ENTRY_KEY!r} in the table that holds {ANCHOR_KEY!r}",
                "it in another table",
            )
        return applied(Entry(path=statement.pinned(), element=i))

    index = _keyed(table, ANCHOR_KEY)[0]
    if not same_meaning(table.values[index], ANCHOR_VALUE):
        return drift(
            f"{ANCHOR_KEY!r} to map to {ANCHOR_VALUE}",
            f"it maps to {source.describe(table.values[index])}",
        )
    key = table.keys[index]
    assert key is not None
    quote = "'" if source.segment(key).startswith("'") else '"'
    return pending(Entry(path=statement.pinned(), element=index, quote=quote))


REGISTRY = Edit(
    "registry",
    "vllm/model_executor/models/registry.py",
    "DFlash2DraftModel resolves to qwen3_dflash2.DFlash2Qwen3ForCausalLM",
    Role.SWITCH,
    (HUNK,),
    judge,
    writer="registry:RegistryEntry",
)
