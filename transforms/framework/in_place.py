"""Hunks that turn 0.27.1's statements into an upstream fix's, in place.

A fix changes a few statements inside code 0.27.1 already has: a kernel
hardened, a loop added after a call, a keyword passed on. Its hunk gives the
code whole, as 0.27.1 has it (`before`) and as the fix leaves it (`after`),
each a file of the edit's (hunk_files.py): a whole function, or a run of
consecutive statements that holds the change and the statement it hangs on.
That one pair is the whole definition:

* the judge finds the code by structure and says which of the two it means
  (`judge_definition`, `judge_run`), or drift, naming where it departs from
  0.27.1's;
* the writer (writing/by_difference.py) rewrites only the statements in
  which the two differ, found by comparing them statement by statement, so that every
  other line of the file, comments and layout included, stays as it was; and
  backwards, the same comparison read the other way.

The rewritten statements must each have a line of their own (`a; b` is
refused: libcst and Python's parser count it differently).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator, Sequence
from typing import ClassVar

from .edit import Hunk, Judged, Site, applied, drift, pending
from .meaning import (
    code_statements,
    meaning,
    parsed,
    signature_difference,
    statements_difference,
)
from .source import BLOCKS, Found, Path, Source, shares_a_line


@dataclasses.dataclass(kw_only=True, eq=False)
class Run(Site):
    """Consecutive statements of one block: `path` is the first, `more` the
    rest. The writer rewrites inside them only."""

    within: ClassVar[bool] = True

    more: tuple[Path, ...] = ()
    #: The forms the run is rewritten between, where they are not the hunk's
    #: own (another release's base form: `judge_definition`'s `forms`).
    before: str | None = None
    after: str | None = None


def shared_line(nodes: Sequence[ast.stmt]) -> ast.stmt | None:
    """The first statement, in `nodes` or any block below them, that shares
    its line with a neighbour (`a; b`)."""
    blocks: list[Sequence[ast.stmt]] = [nodes]
    while blocks:
        block = blocks.pop()
        for index, statement in enumerate(block):
            if shares_a_line(block, index):
                return statement
            for field in BLOCKS:
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    blocks.append(inner)
                elif field == "handlers" and inner:
                    blocks.extend(h.body for h in inner)
    return None


def _one_line_each(source: Source, found: Sequence[Found], what: str) -> Judged | None:
    statement = shared_line([f.node for f in found])  # type: ignore[misc]
    if statement is None:
        return None
    return drift(
        f"each statement of {what} on a line of its own",
        f"{source.describe(statement)} sharing its line with another; split it",
    )


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a]
    return [a.arg for a in every]


def _signature(found: ast.FunctionDef | ast.AsyncFunctionDef, expected: ast.FunctionDef,
               whose: str) -> str | None:
    ours, theirs = _parameters(found), _parameters(expected)
    extra = [f"`{p}`" for p in ours if p not in theirs]
    missing = [f"`{p}`" for p in theirs if p not in ours]
    if extra or missing:
        parts = [f"adds {', '.join(extra)}"] if extra else []
        parts += [f"lacks {', '.join(missing)}"] if missing else []
        return f"its signature {' and '.join(parts)}"
    header = signature_difference(found, expected)
    return None if header is None else header.replace("the spec", whose)


def difference(found: ast.AST, reference: str, whose: str = "0.27.1") -> str:
    """Where `found` first departs from the code in `reference` (`whose`)."""
    expected = parsed(reference)
    if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) and len(expected) == 1:
        (function,) = expected
        assert isinstance(function, ast.FunctionDef)
        header = _signature(found, function, whose)
        if header is not None:
            return header
        inner = statements_difference(
            code_statements(found), code_statements(function), whose, limit=120
        )
        return inner or "its body"
    return statements_difference([found], expected, whose, limit=120) or "its code"  # type: ignore[list-item]


def judge_definition(
    source: Source,
    found: Found,
    hunk: Hunk,
    what: str,
    forms: Sequence[tuple[str, str, str]] = (),
) -> Judged:
    """A whole function: 0.27.1's (pending), the fix's (applied), or drift.

    `forms` are other releases' (release, its function, the fix's form of
    it): found as either, the site carries the pair for the writer. The
    differences a drift names are against 0.27.1's and the hunk's."""
    assert hunk.before is not None
    shared = _one_line_each(source, [found], what)
    if shared is not None:
        return shared
    found_meaning = meaning(found.node)
    candidates = [(Run(path=found.pinned()), hunk.before, hunk.after)] + [
        (Run(path=found.pinned(), before=before, after=after), before, after)
        for _, before, after in forms
    ]
    for site, before, after in candidates:
        if found_meaning == meaning(after):
            return applied(site)
        if found_meaning == meaning(before):
            return pending(site)
    others = "".join(f" or {release}" for release, _, _ in forms)
    return drift(
        f"{what} as vLLM 0.27.1{others} has it, or as the fix leaves it",
        f"another one: against 0.27.1's, {difference(found.node, hunk.before)}; "
        f"against the fix's, {difference(found.node, hunk.after, 'the fix')}",
    )


def _blocks(root: Found, deep: bool) -> Iterator[list[Found]]:
    """The statement lists to search: the root's body, and with `deep`
    every list below it."""
    yield root.statements()
    if not deep:
        return
    pending_: list[Found] = list(root.statements())
    while pending_:
        statement = pending_.pop()
        for field in BLOCKS:
            if field == "handlers":
                for handler in statement.statements("handlers"):
                    block = handler.statements()
                    yield block
                    pending_.extend(block)
                continue
            block = statement.statements(field)
            if block and isinstance(block[0].node, ast.stmt):
                yield block
                pending_.extend(block)


def runs(root: Found, code: str, deep: bool = False) -> list[list[Found]]:
    """Every run of consecutive statements under `root` that means `code`."""
    wanted = [meaning(s) for s in parsed(code)]
    kinds = [type(s) for s in parsed(code)]
    found = []
    for block in _blocks(root, deep):
        for start in range(len(block) - len(wanted) + 1):
            window = block[start : start + len(wanted)]
            if all(type(f.node) is kind for f, kind in zip(window, kinds)) and all(
                meaning(f.node) == m for f, m in zip(window, wanted)
            ):
                found.append(window)
    return found


def run_site(run: Sequence[Found]) -> Run:
    first, *more = run
    return Run(path=first.pinned(), more=tuple(f.pinned() for f in more))


def judge_run_as(source: Source, root: Found, before: str, after: str) -> Judged | None:
    """Another form of a hunk's run, such as the file's style writes it: a
    run meaning `after` (applied) or `before` (pending), found once, each of
    its statements on a line of its own; the site carries the pair for the
    writer. None where neither is found so."""
    # The fix's form first: 0.27.1's may lie inside it.
    done = runs(root, after)
    found, verdict = (done, applied) if done else (runs(root, before), pending)
    if len(found) != 1 or shared_line([f.node for f in found[0]]) is not None:
        return None
    site = run_site(found[0])
    return verdict(Run(path=site.path, more=site.more, before=before, after=after))


def judge_run(
    source: Source, root: Found, hunk: Hunk, what: str, *, deep: bool = False
) -> Judged:
    """A run of statements in `root`'s body (`deep`: in any block below):
    the fix's (applied), 0.27.1's (pending), or drift. `what` says in a
    user's words what was looked for ("`super().set_attn(...)` in
    DFlashSpeculator.set_attn")."""
    assert hunk.before is not None
    done = runs(root, hunk.after, deep)
    if len(done) > 1:
        return drift(f"{what} once", f"{len(done)} times")
    if done:
        return _one_line_each(source, done[0], what) or applied(run_site(done[0]))
    to_do = runs(root, hunk.before, deep)
    if len(to_do) != 1:
        found = f"{len(to_do)} of them" if to_do else "none"
        return drift(f"{what} as vLLM 0.27.1 has it, or as the fix leaves it", found)
    return _one_line_each(source, to_do[0], what) or pending(run_site(to_do[0]))
