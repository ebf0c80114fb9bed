"""Where the tool reaches the edits.

They live in the repository's top-level transforms/, which the wheel and the
editable install map to dflash2_backport.transforms; a source checkout on
sys.path that was never installed has only the top-level package. Every
module of the tool reaches them through this one.
"""

from __future__ import annotations

import importlib

_TOOL = __name__.rpartition(".")[0]

try:
    transforms = importlib.import_module(f"{_TOOL}.transforms")
except ModuleNotFoundError as missing:
    if missing.name != f"{_TOOL}.transforms":
        raise
    transforms = importlib.import_module("transforms")

EDITS = transforms.EDITS


def catalogue():  # type: ignore[no-untyped-def]
    """What the declarations tell people (`--explain`, the README's table)."""
    return importlib.import_module(".catalogue", transforms.__name__)


__all__ = ["EDITS", "catalogue", "transforms"]
