"""What vLLM's config layer does with the upstream fixes the backport
carries beside the DFlash2 PR's edits, observed in one interpreter.

Run by test_runtime_config_fixes.py in each venv (0.27.1 pristine, patched by
`apply --only-pr`, patched by `apply`). Where the venv has no
`DFlash2DraftModel` (pristine), the architecture is first registered as an
alias of the DFlash1 class, so that a DFlash2 draft's config builds and the
observations show what the fixes, not the registry entry, change.
"""

from __future__ import annotations

import json
import sys

from runtime_guest import attempt, emit

DFLASH1_CLASS = "vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM"


def register_dflash2_alias_if_missing() -> bool:
    from vllm.model_executor.models.registry import ModelRegistry

    if "DFlash2DraftModel" in ModelRegistry.get_supported_archs():
        return False
    ModelRegistry.register_model("DFlash2DraftModel", DFLASH1_CLASS)
    return True


def engine_config(models: dict, draft: str | None, *, model: str = "target-8k",
                  k: int = 3, method: str = "dflash", max_model_len: int = 8192,
                  pipeline_parallel_size: int = 1):
    from vllm.engine.arg_utils import EngineArgs

    speculative = None
    if draft is not None:
        speculative = {"method": method, "model": models[draft], "num_speculative_tokens": k}
    return EngineArgs(
        model=models[model],
        skip_tokenizer_init=True,
        max_num_seqs=8,
        max_model_len=max_model_len,
        speculative_config=speculative,
        pipeline_parallel_size=pipeline_parallel_size,
    ).create_engine_config()


def positions(models: dict) -> dict:
    """Per draft: the draft's max_position_embeddings and the target's
    max_model_len, as the engine's config leaves them."""
    drafts = {
        "dflash2": "dflash", "dflash2-yarn": "dflash", "dflash1": "dflash",
        "dflash1-yarn": "dflash", "eagle3-yarn": "eagle3",
    }

    def observe(draft: str, method: str):
        config = engine_config(models, draft, method=method)
        return [
            config.speculative_config.draft_model_config.hf_config.max_position_embeddings,
            config.model_config.max_model_len,
        ]

    return {d: attempt(lambda d=d, m=m: observe(d, m)) for d, m in drafts.items()}


def hashes(models: dict) -> dict:
    """The compile-cache key (`VllmConfig.compute_hash`) at k=3 and k=7, and
    the speculative config's own hash for a DFlash1 draft."""
    seen = {}
    for draft in ("dflash2", "dflash1"):
        for k in (3, 7):
            seen[f"{draft}/k{k}"] = attempt(
                lambda d=draft, k=k: engine_config(models, d, k=k, max_model_len=256)
                .compute_hash()
            )
    seen["dflash1/speculative"] = attempt(
        lambda: engine_config(models, "dflash1", max_model_len=256)
        .speculative_config.compute_hash()
    )
    return seen


def refusals(models: dict) -> dict:
    """Each input the backport refuses, and its DFlash1 counterparts: built
    as a user builds it, the error as `Type: message`."""
    cases = {
        name: (lambda d=name: engine_config(models, d, max_model_len=256))
        for name in ("dflash2-fp8", "dflash2-vocab-1200", "dflash2-vocab-800",
                     "dflash2-reduced-vocab", "dflash1-fp8", "dflash1-vocab-1200",
                     "dflash2-value-scale", "dflash2-value-scale-1", "dflash1-value-scale",
                     "dflash2-not-neox", "dflash1-not-neox")
    }
    # Two pipeline stages, as `--pipeline-parallel-size 2` asks for, with
    # each draft and with none.
    for draft in ("dflash2", "dflash1", None):
        cases[f"{draft or 'target'}-pp2"] = lambda d=draft: engine_config(
            models, d, max_model_len=256, pipeline_parallel_size=2
        )
    # A Speculators-format dflash2 checkpoint, as the model and as the draft.
    cases["speculators-as-model"] = lambda: engine_config(
        models, None, model="speculators-dflash2", max_model_len=256
    )
    cases["speculators-as-draft"] = lambda: engine_config(
        models, "speculators-dflash2", max_model_len=256
    )
    return {
        name: {k: v for k, v in attempt(lambda c=case: c() is not None).items()
               if k != "traceback"}
        for name, case in cases.items()
    }


def main(models: dict) -> None:
    result = {"alias": register_dflash2_alias_if_missing()}
    result["positions"] = positions(models)
    result["hashes"] = hashes(models)
    result["refusals"] = refusals(models)
    emit(result)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
