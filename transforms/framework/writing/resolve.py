"""Follow a judge's `Path` through libcst's tree, and put the tree back
together around what a writer changed there.

libcst keeps `a; b` as one line holding two small statements, where Python's
parser sees two statements; an `elif` as the `if` in another's `orelse`; and
a one-line body (`if x: return`) as a suite of small statements. Each step
counts statements as Python's parser does, so a step's index means the same
here as in the judge, and is checked: the statement there must be of the
kind the judge saw (and have its name), and the last one must mean what the
judge judged. A statement that moved (an earlier hunk inserted code above
it) is looked for by name, or by meaning, in the same list.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Sequence

import libcst as cst

from ..source import PIN, Path, Step, digest

#: Compound statements, by the name of their class in Python's `ast`.
_COMPOUND: dict[str, type[cst.CSTNode]] = {
    "FunctionDef": cst.FunctionDef,
    "AsyncFunctionDef": cst.FunctionDef,
    "ClassDef": cst.ClassDef,
    "If": cst.If,
    "For": cst.For,
    "AsyncFor": cst.For,
    "While": cst.While,
    "With": cst.With,
    "AsyncWith": cst.With,
    "Try": cst.Try,
    "TryStar": cst.TryStar,
    "ExceptHandler": cst.ExceptHandler,
}
_LINES = (cst.SimpleStatementLine,)


class SiteMoved(Exception):
    """The tree no longer has, where the judge said, what the judge found."""


Setter = Callable[[cst.CSTNode, list], cst.CSTNode]


@dataclasses.dataclass(frozen=True, eq=False)
class Frame:
    """One list on the way down: its owner, its items, the item's position."""

    owner: cst.CSTNode
    items: tuple
    position: int
    put: Setter


@dataclasses.dataclass(frozen=True, eq=False)
class Located:
    """What a path leads to, and the way back up to the module."""

    frames: tuple[Frame, ...]
    #: The statement found: a compound one, or a small one on its line.
    node: cst.CSTNode

    @property
    def statement(self) -> cst.CSTNode:
        """What stands in the list: the node, or the line that holds it."""
        frame = self.frames[-1]
        return frame.items[frame.position]

    @property
    def position(self) -> int:
        return self.frames[-1].position

    @property
    def siblings(self) -> list:
        return list(self.frames[-1].items)

    def replaced(self, *statements: cst.CSTNode) -> cst.Module:
        """The module with the statement replaced by `statements` (none:
        removed). An `elif` takes exactly one `if`."""
        frame = self.frames[-1]
        items = list(frame.items)
        items[frame.position : frame.position + 1] = statements
        return self.with_siblings(items)

    def with_siblings(self, items: Sequence) -> cst.Module:
        """The module with the statement's whole list replaced by `items`."""
        new = list(items)
        for depth in range(len(self.frames) - 1, -1, -1):
            frame = self.frames[depth]
            owner = frame.put(frame.owner, new)
            if depth == 0:
                assert isinstance(owner, cst.Module)
                return owner
            outer = self.frames[depth - 1]
            new = list(outer.items)
            new[outer.position] = owner
        raise AssertionError("a path starts at the module")

    def with_node(self, node: cst.CSTNode) -> cst.Module:
        """The module with the node replaced (a small statement on its line)."""
        statement = self.statement
        if statement is self.node:
            return self.replaced(node)
        assert isinstance(statement, cst.SimpleStatementLine | cst.SimpleStatementSuite)
        body = [node if s is self.node else s for s in statement.body]
        return self.replaced(statement.with_changes(body=body))


def locate(tree: cst.Module, path: Path) -> Located:
    """Where `path` leads in `tree`; SiteMoved if it leads elsewhere."""
    frames: list[Frame] = []
    owner: cst.CSTNode = tree
    node: cst.CSTNode = tree
    for depth, step in enumerate(path):
        items, put = _list(owner, step.field)
        position, node = _find(items, step, last=depth == len(path) - 1, tree=tree)
        frames.append(Frame(owner, tuple(items), position, put))
        owner = node
    return Located(tuple(frames), node)


def _list(owner: cst.CSTNode, field: str) -> tuple[Sequence, Setter]:
    """The libcst list that holds what Python's parser keeps in `field`."""
    if isinstance(owner, cst.Module):
        assert field == "body", field
        return owner.body, lambda o, items: o.with_changes(body=items)
    if field == "handlers":
        return owner.handlers, lambda o, items: o.with_changes(handlers=items)  # type: ignore[attr-defined]
    if field == "body":
        return owner.body.body, _block_setter("body")  # type: ignore[attr-defined]
    if field == "orelse" and isinstance(getattr(owner, "orelse", None), cst.If):
        # An `elif`: the one statement of the else-part.
        def put_elif(o: cst.CSTNode, items: list) -> cst.CSTNode:
            (only,) = items
            assert isinstance(only, cst.If)
            return o.with_changes(orelse=only)

        return (owner.orelse,), put_elif  # type: ignore[attr-defined]
    clause = getattr(owner, field, None)
    if clause is None:
        raise SiteMoved(f"no {field} clause")
    return clause.body.body, _clause_setter(field)


def _block_setter(field: str) -> Setter:
    def put(owner: cst.CSTNode, items: list) -> cst.CSTNode:
        block = getattr(owner, field)
        return owner.with_changes(**{field: block.with_changes(body=items)})

    return put


def _clause_setter(field: str) -> Setter:
    def put(owner: cst.CSTNode, items: list) -> cst.CSTNode:
        clause = getattr(owner, field)
        return owner.with_changes(
            **{field: clause.with_changes(body=clause.body.with_changes(body=items))}
        )

    return put


def _entries(items: Sequence) -> list[tuple[int, cst.CSTNode]]:
    """(position in the list, statement) for each statement as Python's parser
    counts them: each small statement of a line is one."""
    entries = []
    for position, item in enumerate(items):
        if isinstance(item, _LINES):
            entries += [(position, small) for small in item.body]
        else:
            entries.append((position, item))
    return entries


def _is(node: cst.CSTNode, step: Step) -> bool:
    kind = _COMPOUND.get(step.kind)
    if kind is None:
        return type(node).__name__ == step.kind
    if not isinstance(node, kind):
        return False
    return not step.name or node.name.value == step.name  # type: ignore[attr-defined]


def _find(
    items: Sequence, step: Step, last: bool, tree: cst.Module
) -> tuple[int, cst.CSTNode]:
    entries = _entries(items)
    if step.index < len(entries):
        position, node = entries[step.index]
        if _is(node, step) and (not last or _means(tree, node, step)):
            return position, node
    # Moved: a definition by its name, anything else by what it means.
    matches = [
        (p, n)
        for p, n in entries
        if _is(n, step) and (step.name or step.meaning) and (not last or _means(tree, n, step))
    ]
    if len(matches) == 1:
        return matches[0]
    what = f"{step.kind} {step.name}".strip()
    raise SiteMoved(f"{what} is not where the judge found it (statement {step.index})")


def _means(tree: cst.Module, node: cst.CSTNode, step: Step) -> bool:
    """Whether the node means what the judge judged there."""
    if not step.meaning:
        return True
    assert step.meaning != PIN, "a site is pinned (Edit.pinned) before it is written"
    (parsed,) = ast.parse(tree.code_for_node(node)).body
    return digest(parsed) == step.meaning
