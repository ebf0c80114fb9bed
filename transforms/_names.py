"""What names a module or a class body binds, where each comes from, and
what reads them.

An edit that inserts code relying on a name must know the name exists when
that code runs, an edit that defines a name must know it shadows nothing, and
a revert that removes a name must know nothing else still reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider

from ._meaning import describe, dotted, statements_of

DEFINED_HERE = ""
#: The key under which a star import's module is recorded: it may bind anything.
STAR = "*"

Definition = TypeVar("Definition", cst.FunctionDef, cst.ClassDef)


def named(
    statements: Sequence[cst.CSTNode], kind: type[Definition], name: str
) -> list[Definition]:
    """The `def`s (or `class`es) of that name directly among the statements."""
    return [s for s in statements if isinstance(s, kind) and s.name.value == name]


def members_named(
    cls: cst.ClassDef, kind: type[Definition], name: str
) -> list[Definition]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return named(body, kind, name)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Tuple | cst.List):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []


def module_bindings(statements: Sequence[cst.CSTNode]) -> dict[str, list[str]]:
    """Names the module-level statements bind, each with every binding's origin.

    An import gives its dotted origin ("functools.cache"); a def, class or
    assignment gives DEFINED_HERE. Only statements that run whenever the
    module is imported count, plus `try` blocks (the optional import pattern):
    a name bound only under `if TYPE_CHECKING:` does not exist when a
    function's annotations or a class body are evaluated.
    """
    found: dict[str, list[str]] = {}

    def bind(name: str, origin: str) -> None:
        found.setdefault(name, []).append(origin)

    def visit(statements: Sequence[cst.CSTNode]) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
                bind(stmt.name.value, DEFINED_HERE)
            elif isinstance(stmt, cst.Try):
                visit(stmt.body.body)
                for handler in stmt.handlers:
                    visit(handler.body.body)
                if stmt.orelse is not None:
                    visit(stmt.orelse.body.body)
                if stmt.finalbody is not None:
                    visit(stmt.finalbody.body.body)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    for name, origin in _small_bindings(small):
                        bind(name, origin)

    visit(statements)
    return found


def _small_bindings(small: cst.BaseSmallStatement) -> list[tuple[str, str]]:
    if isinstance(small, cst.Import):
        bound = []
        for alias in small.names:
            full = dotted(alias.name) or ""
            if alias.asname is not None:
                bound.append((dotted(alias.asname.name) or "", full))
            else:
                head = full.split(".")[0]
                bound.append((head, head))
        return bound
    if isinstance(small, cst.ImportFrom):
        module = "." * len(small.relative)
        if small.module is not None:
            module += dotted(small.module) or ""
        if isinstance(small.names, cst.ImportStar):
            return [(STAR, module)]
        bound = []
        for alias in small.names:
            name = dotted(alias.name) or ""
            as_name = alias.asname.name if alias.asname is not None else None
            bound.append(
                (
                    dotted(as_name) if as_name else name,
                    f"{module}.{name}",
                )
            )
        return bound
    if isinstance(small, cst.Assign):
        return [
            (n, DEFINED_HERE) for t in small.targets for n in _target_names(t.target)
        ]
    if isinstance(small, cst.AnnAssign | cst.AugAssign):
        return [(n, DEFINED_HERE) for n in _target_names(small.target)]
    return []


def may_bind(bindings: dict[str, list[str]], name: str) -> bool:
    """Whether `name` exists, counting a star import as possibly binding it."""
    return name in bindings or STAR in bindings


def origin_words(origin: str) -> str:
    return "defined in this module" if origin == DEFINED_HERE else f"`{origin}`"


def class_bindings(cls: cst.ClassDef, name: str) -> list[cst.CSTNode]:
    """Class-body statements that bind `name`: assignments, methods, classes."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()

    def binds(target: cst.BaseExpression) -> bool:
        return isinstance(target, cst.Name) and target.value == name

    found: list[cst.CSTNode] = []
    for statement in body:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            if statement.name.value == name:
                found.append(statement)
        elif isinstance(statement, cst.SimpleStatementLine):
            found.extend(
                small
                for small in statement.body
                if (
                    isinstance(small, cst.Assign)
                    and any(binds(t.target) for t in small.targets)
                )
                or (isinstance(small, cst.AnnAssign) and binds(small.target))
            )
    return found


class Reads:
    """Where the module reads its module-level names, worked out on first use."""

    def __init__(self, tree: cst.Module) -> None:
        self.tree = tree
        self._scope: GlobalScope | None = None

    def elsewhere(self, name: str, leaving: Sequence[cst.CSTNode]) -> list[str]:
        """The module's definitions that read `name`, those in `leaving` (code
        the revert removes) left out: a method as `Class.method`, a read
        outside any definition by its statement."""
        if self._scope is None:
            wrapper = MetadataWrapper(self.tree, unsafe_skip_copy=True)
            scope = wrapper.resolve(ScopeProvider)[self.tree]
            assert isinstance(scope, GlobalScope)
            self._scope = scope
        reads = {
            id(access.node)
            for assignment in self._scope.assignments[name]
            for access in assignment.references
        } - _node_ids(leaving)
        if not reads:
            return []
        readers: list[str] = []
        for statement in self.tree.body:
            if not _node_ids([statement]) & reads:
                continue
            if isinstance(statement, cst.ClassDef):
                members = [
                    f"`{statement.name.value}.{member.name.value}`"
                    for member in statements_of(statement.body)
                    if isinstance(member, cst.FunctionDef | cst.ClassDef)
                    and _node_ids([member]) & reads
                ]
                readers += members or [f"`{statement.name.value}`"]
            elif isinstance(statement, cst.FunctionDef):
                readers.append(f"`{statement.name.value}`")
            else:
                readers.append(describe(statement))
        return readers


def _node_ids(nodes: Sequence[cst.CSTNode]) -> set[int]:
    ids: set[int] = set()

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            ids.add(id(node))
            return True

    for node in nodes:
        node.visit(Collect())
    return ids
