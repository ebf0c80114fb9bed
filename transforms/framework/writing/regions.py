"""Rewrite only the parts of a file that the hunks touch.

Parsing with libcst and printing the tree back cost more than everything
else an `apply` does, and most of a target file is code no hunk goes near:
the registry's other tables, most of `VllmConfig`. So each part a hunk
touches, with the statement before it and the one after, is parsed on its
own, rewritten, and put back in place of its lines.

A region is a run of statements of one block: the module, or the body of a
module-level class (parsed under a stand-in `class _:` header). libcst gives
a statement the comments and blank lines above it, and a block the comments
indented into it after its last statement; a region starts right after the
statement before it (or at the start of its block) and ends with its last
statement, so every line inside it belongs where the whole file's parse puts
it, except at its two ends. Those are the two neighbours, which a writer may
read (is the statement before an import?) and whose leading lines it may
change (the statement after a removed one takes back its blank lines), but
which no site points at. A region whose last statement ends its block is
widened instead: the module's to the end of the file, a class's to the whole
class.

The newline and the indentation libcst fits inserted code with are those of
the whole file; a region that would read them otherwise is not used, and the
file is parsed whole.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import tokenize
from collections.abc import Callable, Sequence

import libcst as cst

from ..edit import Edit, Judged
from ..source import Path, Source, Step
from ..vocabulary import Goal
from .jobs import parse_module, rewrite_order

_NEWLINE = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
#: The stand-in header a class's members are parsed under.
WRAPPER = "_"


@dataclasses.dataclass(frozen=True, eq=False)
class Regions:
    """Where a file is rewritten, and the style libcst reads in it whole."""

    newline: str
    indent: str
    #: Last in the file first.
    regions: tuple[Region, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Region:
    #: The lines parsed (from 1, both included).
    first: int
    last: int
    #: The module-level class whose members it holds; None at module level.
    owner: int | None
    #: The first statement of its block in the region, as Python's parser counts.
    start: int
    #: The sites' paths rebased into the region, by their paths in the file.
    paths: tuple[tuple[Path, Path], ...]


def plan(
    source: Source, judged: Sequence[tuple[Edit, dict[str, Judged]]], goal: Goal
) -> Regions | None:
    """The regions that hold every site the goal rewrites; None to parse
    the file whole."""
    sites = [site for _, _, site, _ in rewrite_order(judged, goal)]
    body = source.tree.body
    # Statements the sites point at, by module index or by class and member,
    # and whether the statements around each must be parsed with it: not
    # where the writer rewrites only inside it.
    module: dict[int, bool] = {}
    members: dict[int, dict[int, bool]] = {}
    for site in sites:
        for path in site.paths():
            top = path[0].index
            if len(path) > 1 and isinstance(body[top], ast.ClassDef) and path[1].field == "body":
                inside = members.setdefault(top, {})
                index, deep = path[1].index, len(path) > 2
            else:
                inside, index, deep = module, top, len(path) > 1
            inside[index] = inside.get(index, False) or not (site.within or deep)
    # A class with a site at its last member is rewritten whole: comments
    # after that member may be its own.
    for owner, indices in members.items():
        last = len(body[owner].body) - 1  # type: ignore[attr-defined]
        if indices.get(last):
            module[owner] = True
    regions: list[tuple[int, int, int | None, int]] = []  # (first line, last line, owner, start)
    lines = _line_count(source.text)
    module_runs = _runs(body, module)
    for lo, hi in module_runs:
        first = body[lo - 1].end_lineno + 1 if lo else 1  # type: ignore[operator]
        if hi + 1 < len(body):
            last = _with_footer(source, body[hi].end_lineno, 0, body[hi + 1].lineno)  # type: ignore[arg-type]
        else:
            last = lines
        regions.append((first, last, None, lo))
    for owner, indices in members.items():
        if any(lo <= owner <= hi for lo, hi in module_runs):
            continue  # inside a module-level region already
        cls = body[owner]
        assert isinstance(cls, ast.ClassDef)
        indent = cls.body[0].col_offset
        for lo, hi in _runs(cls.body, indices):
            first = cls.body[lo - 1].end_lineno + 1 if lo else _header_end(source, cls) + 1  # type: ignore[operator]
            end = cls.body[hi + 1].lineno if hi + 1 < len(cls.body) else cls.end_lineno + 1  # type: ignore[operator]
            last = _with_footer(source, cls.body[hi].end_lineno, indent, end)  # type: ignore[arg-type]
            regions.append((first, last, owner, lo))
    regions.sort(reverse=True)
    placed = []
    for first, last, owner, start in regions:
        paths = tuple(
            (path, _rebased(path, owner, start))
            for site in sites
            for path in site.paths()
            if _inside(source, path, first, last)
        )
        placed.append(Region(first, last, owner, start, paths))
    # Each site lies in one region, every path of it.
    for site in sites:
        holding = {i for i, r in enumerate(placed) for p in site.paths() if p in dict(r.paths)}
        if len(holding) != 1:
            return None
    return Regions(*_style(source), tuple(placed))


def _runs(block: Sequence[ast.stmt], indices: dict[int, bool]) -> list[tuple[int, int]]:
    """The runs of statements holding `indices`, each with a neighbour on
    either side where it says so, whole lines (`a; b` is one line),
    overlapping runs joined."""
    runs: list[tuple[int, int]] = []
    for index in sorted(indices):
        around = 1 if indices[index] else 0
        lo, hi = max(index - around, 0), min(index + around, len(block) - 1)
        while lo > 0 and block[lo - 1].end_lineno == block[lo].lineno:
            lo -= 1
        while hi + 1 < len(block) and block[hi + 1].lineno == block[hi].end_lineno:
            hi += 1
        if runs and lo <= runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], max(hi, runs[-1][1]))
        else:
            runs.append((lo, hi))
    return runs


def _with_footer(source: Source, last: int, indent: int, before: int) -> int:
    """The region's last line, taking in the comments after its last
    statement that are indented deeper than its block (they close a block
    inside the region), up to line `before`."""
    end = last
    for number in range(last + 1, before):
        line = source.line(number).decode()
        stripped = line.lstrip(" \t")
        if not stripped.strip():
            continue
        if not stripped.startswith("#") or len(line) - len(stripped) <= indent:
            break
        end = number
    return end


def _inside(source: Source, path: Path, first: int, last: int) -> bool:
    node = source.at(path).node
    return first <= node.lineno and node.end_lineno <= last  # type: ignore[attr-defined]


def _rebased(path: Path, owner: int | None, start: int) -> Path:
    head, *rest = path
    if owner is None:
        return (head._replace(index=head.index - start), *rest)
    member, *deeper = rest
    return (
        Step("body", 0, "ClassDef", WRAPPER),
        member._replace(index=member.index - start),
        *deeper,
    )


def _header_end(source: Source, cls: ast.ClassDef) -> int:
    """The line of the colon that ends a class's header."""
    lines = (source.line(n).decode() for n in range(cls.lineno, cls.end_lineno + 1))  # type: ignore[operator]
    depth = 0
    for token in tokenize.generate_tokens(lambda: next(lines, "")):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.OP and token.string == ":" and depth == 0:
            return cls.lineno + token.start[0] - 1
    raise AssertionError("a class header ends with a colon")


def _line_count(text: str) -> int:
    return len(_LINE.findall(text))


# -- rewriting ------------------------------------------------------------------


def _style(source: Source) -> tuple[str, str]:
    """The newline and the indentation libcst fits new code with, reading
    the whole file: its first newline, and the indent of its first indented
    block (which only a compound statement at module level can open)."""
    newline = _NEWLINE.search(source.text)
    indent = "    "
    compound = next((s for s in source.tree.body if hasattr(s, "body")), None)
    if compound is not None:
        start = min([compound.lineno, *(d.lineno for d in getattr(compound, "decorator_list", []))])
        lines = (source.line(n).decode() for n in range(start, _line_count(source.text) + 1))
        try:
            for token in tokenize.generate_tokens(lambda: next(lines, "")):
                if token.type == tokenize.INDENT:
                    indent = token.string
                    break
        except (tokenize.TokenError, SyntaxError):
            pass
    return (newline.group() if newline else "\n"), indent


def rewrite_regions(
    text: str,
    judged: Sequence[tuple[Edit, dict[str, Judged]]],
    goal: Goal,
    regions: Regions,
    writer_for: Callable[[Edit], type],
) -> str | None:
    """`text` with each region rewritten by the writers `writer_for` gives;
    None where a region would not read as the whole file does (then the file
    is parsed whole)."""
    newline, indent = regions.newline, regions.indent
    lines = _LINE.findall(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    jobs = rewrite_order(judged, goal)
    for region in regions.regions:  # last in the file first
        header = f"class {WRAPPER}:{newline}" if region.owner is not None else ""
        part = text[starts[region.first - 1] : starts[region.last]]
        try:
            tree = parse_module(header + part)
        except cst.ParserSyntaxError:
            return None
        if tree.default_newline != newline or tree.default_indent != indent:
            return None
        rebased = dict(region.paths)
        for edit, hunk, site, direction in jobs:
            if site.path in rebased:
                moved = site.with_paths(rebased.__getitem__)
                tree = writer_for(edit)(direction=direction).rewrite(tree, hunk, moved)
        code = tree.code
        assert code.startswith(header)
        text = text[: starts[region.first - 1]] + code[len(header) :] + text[starts[region.last] :]
    return text
