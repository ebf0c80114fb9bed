"""Tiny local model directories (config.json only) for vLLM's config layer.

No weights: the runtime checks build configs, registries and single layers,
never load a checkpoint. The configs are the ones `dflash2-backport verify`
writes (dflash2_backport/verification/probes.py), so the tests and the
command probe the same models.
"""

from __future__ import annotations

from dflash2_backport.verification.probes import (  # noqa: F401 -- re-exported for the tests
    DFLASH1_CAUSAL,
    DFLASH1_DRAFTS,
    DFLASH2_DRAFT,
    HIDDEN_SIZE,
    MOE_TARGET,
    TARGET,
    VOCAB_SIZE,
    write_models,
)
