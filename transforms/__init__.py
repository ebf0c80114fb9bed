"""The spec's seven edits, one codemod module each, in upstream order.

Edit 6 touches two files, so it is two codemods sharing one edit name.

The codemods load libcst, so they are imported on first use of `CODEMODS`
(or of a name below); `hunks` and the quick judge stay free of it.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "BackportCodemod": "._base",
    "EditRefused": "._base",
    "HunkVerdict": "._base",
    "State": "._base",
}


def __getattr__(name: str) -> Any:
    if name == "CODEMODS":
        from .causality import Causality
        from .draft_logit_cache import DraftLogitCache
        from .gumbel import GumbelNoisedArgmax
        from .registry import RegistryEntry
        from .speculator_selection import SpeculatorSelection, V2RunnerForcing
        from .subclass_seams import SubclassSeams
        from .vocab_parallel_topk import VocabParallelTopK

        codemods = (
            Causality,
            SubclassSeams,
            RegistryEntry,
            VocabParallelTopK,
            GumbelNoisedArgmax,
            SpeculatorSelection,
            V2RunnerForcing,
            DraftLogitCache,
        )
        globals()["CODEMODS"] = codemods
        return codemods
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CODEMODS", "BackportCodemod", "EditRefused", "HunkVerdict", "State"]
