"""Ways of judging that several edits share: a function the spec adds, and a
method it adds right before another."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .edit import Judged, Site, applied, drift, exactly_one, pending
from .meaning import function_of, same_meaning, where_it_differs
from .source import Found


def other_version(
    existing: Sequence[Found],
    source: str,
    expected: str,
    remedy: str = "the backport will not overwrite it",
) -> Judged | None:
    """Drift if a function the spec adds exists with another meaning.

    One with another body is someone else's code: never taken as done,
    never replaced.
    """
    for function in existing:
        if not same_meaning(function.node, source):
            how = where_it_differs(function.node, source)  # type: ignore[arg-type]
            return drift(expected, f"a different `{function.name}` ({how}); {remedy}")
    return None


def method_before(
    cls: Found, source: str, anchor: str, *, expected: str, remedy: str
) -> Judged:
    """Judge a method the spec adds right before the method `anchor`.

    An existing method of that name counts as applied only if it is the only
    one and means what `source` does; `expected` and `remedy` tell the user
    what the spec's does and what to do about theirs. The site: the anchor
    when pending, the method when applied.
    """
    name = function_of(source).name
    where = cls.name
    existing = cls.defs(name)
    if len(existing) > 1:
        return drift(f"at most one {where}.{name}", f"{len(existing)}")
    refused = other_version(existing, source, expected, remedy)
    if refused is not None:
        return refused
    if existing:
        return applied(Site(path=existing[0].pinned()))
    found = exactly_one(cls.defs(anchor), f"one method {where}.{anchor} to add {name} before")
    return found if isinstance(found, Judged) else pending(Site(path=found.pinned()))


def is_attribute(node: ast.AST, owner: str, name: str) -> bool:
    """Whether `node` is `owner.name`, e.g. `self.layers`."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    )
