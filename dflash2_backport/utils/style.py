"""Colour for state words on a terminal, and none anywhere else.

Colour only where a person reads it: the stream is a terminal, `NO_COLOR` is
unset or empty (https://no-color.org), and TERM is not "dumb". Pipes, files,
CI logs and --json never get escape codes. The word is padded before it is
painted, so columns line up either way.
"""

from __future__ import annotations

import os
from typing import TextIO

# State word -> SGR code: good news green, work to do yellow, refusal red.
COLOURS = {
    "pass": "32", "applied": "32", "patched": "32", "installed": "32", "current": "32",
    "updated": "32", "reverted": "32", "removed": "32", "kept": "32",
    "pending": "33", "original": "33", "absent": "33", "present": "33",
    "FAIL": "31", "drift": "31", "error": "31", "refused": "31",
}


def wanted(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(word: str, stream: TextIO, width: int = 0) -> str:
    """`word` padded to `width`, coloured by its state when `stream` wants it."""
    padded = word.ljust(width)
    code = COLOURS.get(word)
    if code is None or not wanted(stream):
        return padded
    return f"\033[{code}m{word}\033[0m{padded[len(word):]}"
