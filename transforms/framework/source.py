"""A target file as Python's own parser reads it, and the way to every
statement in it.

The judges find their targets here, once, and hand each writer a `Path` to
what they found: a step per statement list on the way down, each with the
position Python's parser gives the statement and its kind (and name, for a
`def` or `class`). The writer follows the same steps through libcst's tree
and checks at every step that it stands where the judge stood.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from .meaning import meaning

#: Statement lists a path may step into, in the order Python's parser keeps them.
BLOCKS = ("body", "handlers", "orelse", "finalbody")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Step(NamedTuple):
    """One step down: the statement at `index` of the owner's list `field`."""

    field: str
    #: As Python's parser counts: `a; b` is two statements.
    index: int
    #: The statement's class in Python's `ast` ("ClassDef", "If", "Assign").
    kind: str
    #: The name of a `def` or `class`; empty for anything else.
    name: str = ""
    #: On the last step of a pinned path, a digest of what the statement
    #: means (see `meaning.py`), so that the writer rewrites only what was
    #: judged; PIN until `pin` has worked it out.
    meaning: str = ""


Path = tuple[Step, ...]
#: A pin not worked out yet: a command that writes nothing never needs it.
PIN = "?"


def digest(node: ast.AST) -> str:
    import hashlib  # loaded only by a command that writes

    return hashlib.blake2b(meaning(node).encode(), digest_size=12).hexdigest()


class Found(NamedTuple):
    """A node of the file and the path to it (the module's path is empty)."""

    node: ast.AST
    path: Path

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "")

    def statements(self, field: str = "body") -> list[Found]:
        """The statements of one of the node's lists, each with its path."""
        return [
            Found(s, (*self.path, _step(field, i, s)))
            for i, s in enumerate(getattr(self.node, field, None) or ())
        ]

    def defs(self, name: str) -> list[Found]:
        """The functions of that name directly in the body."""
        return [f for f in self.statements() if isinstance(f.node, FUNCTIONS) and f.name == name]

    def classes(self, name: str) -> list[Found]:
        """The classes of that name directly in the body."""
        return [
            f for f in self.statements() if isinstance(f.node, ast.ClassDef) and f.name == name
        ]

    def walk(self, test: Callable[[ast.stmt], bool]) -> list[Found]:
        """Every statement below the node, in any block, that passes `test`,
        in the order of the file."""
        return [found for found in self._below() if test(found.node)]  # type: ignore[arg-type]

    def _below(self) -> Iterator[Found]:
        for field in BLOCKS:
            for child in self.statements(field):
                yield child
                yield from child._below()

    def pinned(self) -> Path:
        """The path, to be pinned to what the node means (see `pin`)."""
        if not self.path or isinstance(self.node, ast.ClassDef):
            # A class is known by its name; its members are judged one by one.
            return self.path
        return (*self.path[:-1], self.path[-1]._replace(meaning=PIN))


def _step(field: str, index: int, node: ast.AST) -> Step:
    return Step(field, index, type(node).__name__, node.name if isinstance(node, DEFINITIONS) else "")


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def encoding_of(data: bytes) -> str:
    """The encoding Python reads a source file's bytes in: its PEP 263
    cookie's, else UTF-8 ("utf-8-sig" after a BOM). Raises SyntaxError as
    `tokenize.detect_encoding` does."""
    # CPython translates newlines before it reads the first two lines for a
    # cookie; as it is, a file whose lines end in CR alone is one line to
    # `detect_encoding`, and a comment anywhere in it such as
    # `# speculative decoding: compute K` would name its encoding.
    head = b"\n".join(data.splitlines()[:2])
    return tokenize.detect_encoding(io.BytesIO(head).readline)[0]


class Source:
    """A file's text and Python's tree of it.

    Raises SyntaxError or ValueError (a NUL byte) as `ast.parse` does.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self._lines: list[bytes] | None = None

    @property
    def module(self) -> Found:
        return Found(self.tree, ())

    def at(self, path: Path) -> Found:
        """The statement a path leads to."""
        found = self.module
        for step in path:
            found = found.statements(step.field)[step.index]
        return found

    def neighbour(self, found: Found, offset: int) -> Found | None:
        """The statement `offset` places from `found` in its own block
        (-1: right before it), or None past either end of the block."""
        siblings = self.at(found.path[:-1]).statements(found.path[-1].field)
        index = found.path[-1].index + offset
        return siblings[index] if 0 <= index < len(siblings) else None

    def pin(self, path: Path) -> Path:
        """The path with its pin worked out."""
        if not path or path[-1].meaning != PIN:
            return path
        return (*path[:-1], path[-1]._replace(meaning=digest(self.at(path).node)))

    def line(self, number: int) -> bytes:
        """Line `number` (from 1), as UTF-8, the encoding of the parser's offsets."""
        if self._lines is None:
            self._lines = [m.group().encode() for m in _LINE.finditer(self.text)]
        return self._lines[number - 1]

    def segment(self, node: ast.AST) -> str:
        """The node's text, exactly as the file has it."""
        first, last = node.lineno, node.end_lineno  # type: ignore[attr-defined]
        start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        assert last is not None and end is not None
        if first == last:
            return self.line(first)[start:end].decode()
        lines = [self.line(first)[start:]]
        lines += [self.line(n) for n in range(first + 1, last)]
        lines.append(self.line(last)[:end])
        return b"".join(lines).decode()

    def describe(self, node: ast.AST, limit: int = 60) -> str:
        """A short, single-line rendering of a node for error messages."""
        text = " ".join(self.segment(node).split())
        return repr(text if len(text) <= limit else text[: limit - 3] + "...")

    def starts_with(self, node: ast.AST, word: bytes) -> bool:
        """Whether the node's text starts with `word` (`elif` for an `If`)."""
        return self.line(node.lineno)[node.col_offset :].startswith(word)  # type: ignore[attr-defined]


def shares_a_line(block: Sequence[ast.stmt], index: int) -> bool:
    """Whether the statement shares a line with a neighbour (`a; b`)."""
    statement = block[index]
    before = index > 0 and block[index - 1].end_lineno == statement.lineno
    after = index + 1 < len(block) and block[index + 1].lineno == statement.end_lineno
    return before or after
