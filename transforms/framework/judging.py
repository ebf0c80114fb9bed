"""Ways of judging that several edits share: a function the spec adds, a
method it adds right before another, and a statement it adds right next to
another in the same block."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from .edit import Hunk, Judged, Site, applied, drift, exactly_one, pending
from .meaning import function_of, parsed, same_meaning, where_it_differs
from .source import Found


def other_version(
    existing: Sequence[Found],
    source: str,
    expected: str,
    remedy: str = "the backport will not overwrite it",
    earlier: Sequence[str] = (),
) -> Judged | None:
    """Drift if a function the spec adds exists with another meaning.

    One with another body is someone else's code: never taken as done,
    never replaced. One that means what an earlier version of this tool
    wrote (`earlier`) is this edit, applied.
    """
    for function in existing:
        if not any(same_meaning(function.node, known) for known in (source, *earlier)):
            how = where_it_differs(function.node, source)  # type: ignore[arg-type]
            return drift(expected, f"a different `{function.name}` ({how}); {remedy}")
    return None


def method_before(
    cls: Found,
    source: str,
    anchor: str,
    *,
    expected: str,
    remedy: str,
    earlier: Sequence[str] = (),
) -> Judged:
    """Judge a method the spec adds right before the method `anchor`.

    An existing method of that name counts as applied only if it is the only
    one and means what `source` does, or what an earlier version of this
    tool wrote (`earlier`: a tree that version patched is reverted, and
    left alone by apply); `expected` and `remedy` tell the user what the
    spec's does and what to do about theirs. The site: the anchor when
    pending, the method when applied.
    """
    name = function_of(source).name
    where = cls.name
    existing = cls.defs(name)
    if len(existing) > 1:
        return drift(f"at most one {where}.{name}", f"{len(existing)}")
    refused = other_version(existing, source, expected, remedy, earlier)
    if refused is not None:
        return refused
    if existing:
        return applied(Site(path=existing[0].pinned()))
    found = exactly_one(cls.defs(anchor), f"one method {where}.{anchor} to add {name} before")
    return found if isinstance(found, Judged) else pending(Site(path=found.pinned()))


def statement_beside(
    scope: Found,
    is_anchor: Callable[[ast.stmt], bool],
    anchor: str,
    code: str,
    *,
    after: bool,
) -> Judged:
    """Judge a statement the backport adds right after (or before) the one
    statement of `scope`'s body that `is_anchor` picks (`anchor` says which
    in words: "`self.try_verify_and_update_config()`").

    Applied when `code` stands right there (the site: that statement);
    pending when it is nowhere in `scope` (the site: the anchor); drift when
    the anchor is missing or not alone, or `code` stands elsewhere in
    `scope`, nested or not, where it would run at another time, or twice.
    """
    statements = scope.statements()
    side = "after" if after else "before"
    expected = f"`{' '.join(code.split())}` right {side} {anchor} in {scope.name}"
    anchors = [i for i, s in enumerate(statements) if is_anchor(s.node)]  # type: ignore[arg-type]
    if len(anchors) != 1:
        return drift(expected, f"{len(anchors)} such statements" if anchors else f"no {anchor}")
    (index,) = anchors
    beside = index + 1 if after else index - 1
    # As statements: `self.f()` alone would read as an expression.
    wanted = parsed(code)
    ours = scope.walk(lambda s: same_meaning([s], wanted))
    if not ours:
        return pending(Site(path=statements[index].pinned()))
    if (
        len(ours) == 1
        and 0 <= beside < len(statements)
        and ours[0].path == statements[beside].path
    ):
        return applied(Site(path=statements[beside].pinned()))
    return drift(expected, f"{len(ours)} of them" if len(ours) > 1 else "it elsewhere")


def is_attribute(node: ast.AST, owner: str, name: str) -> bool:
    """Whether `node` is `owner.name`, e.g. `self.layers`."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    )


def is_call_of(statement: ast.AST, owner: str, name: str) -> bool:
    """Whether `statement` is the bare call `owner.name(...)`."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and is_attribute(statement.value.func, owner, name)
    )


def kept_while_used(
    hunk: Hunk, name: str, users: Sequence[str], *, verb: str = "read", what: str = "it"
) -> dict[str, Judged]:
    """Drift for a revert that would take `name` away (`what` goes: the
    definition, or its import) while code it keeps, `users`, still uses it."""
    if not users:
        return {}
    return {
        hunk.name: drift(
            f"`{name}` {verb} by nothing else in the module, so that {what} can go",
            f"it {verb} by {', '.join(users)} (removing it would break "
            + ("it" if len(users) == 1 else "them")
            + ")",
        )
    }
