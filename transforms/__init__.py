"""The spec's seven edits, one codemod module each, in upstream order.

Edit 6 touches two files, so it is two codemods sharing one edit name.
"""

from ._base import BackportCodemod, EditRefused, HunkVerdict, State
from .causality import Causality
from .draft_logit_cache import DraftLogitCache
from .gumbel import GumbelNoisedArgmax
from .registry import RegistryEntry
from .speculator_selection import SpeculatorSelection, V2RunnerForcing
from .subclass_seams import SubclassSeams
from .vocab_parallel_topk import VocabParallelTopK

CODEMODS: tuple[type[BackportCodemod], ...] = (
    Causality,
    SubclassSeams,
    RegistryEntry,
    VocabParallelTopK,
    GumbelNoisedArgmax,
    SpeculatorSelection,
    V2RunnerForcing,
    DraftLogitCache,
)

__all__ = ["CODEMODS", "BackportCodemod", "EditRefused", "HunkVerdict", "State"]
