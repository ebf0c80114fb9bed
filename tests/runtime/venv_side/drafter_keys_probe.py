"""What a DFlash draft model makes of `use_aux_hidden_state` and
`mask_token_id` given at the top level of its config, not in its
`dflash_config`: observed in one interpreter.

Run by tests/runtime/test_runtime_drafter_keys.py in each release as it
ships, patched by `apply --only-pr` and patched by `apply`. argv[1] is a
JSON object: the model directories ("models", the target and the drafts)
and the drafts to build ("drafts").

Each draft's model is built as vLLM's loader builds it: the engine config
`EngineArgs` makes, the class the registry resolves for the draft's
architecture, constructed on the CPU under that config (no weights).
Reported: the model's `use_aux_hidden_state` and `mask_token_id`, and
whether it has the `fc` projection of the target's hidden states.
"""

from __future__ import annotations

import json
import sys

from runtime_guest import attempt, distributed, emit, stub_silu_and_mul


def built(models: dict, draft: str) -> dict:
    import torch

    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models.registry import ModelRegistry

    config = EngineArgs(
        model=models["target"], skip_tokenizer_init=True, max_model_len=256,
        max_num_seqs=8, load_format="dummy", enforce_eager=True,
        speculative_config={"method": "dflash", "model": models[draft],
                            "num_speculative_tokens": 3},
    ).create_engine_config()
    draft_config = config.speculative_config.draft_model_config
    cls, _ = ModelRegistry.resolve_model_cls(draft_config.architectures, draft_config)
    with distributed(config), set_current_vllm_config(config), torch.device("cpu"):
        model = cls(vllm_config=config, prefix="draft")
    inner = model.model
    return {
        "class": type(model).__name__,
        "use_aux_hidden_state": inner.use_aux_hidden_state,
        "mask_token_id": inner.mask_token_id,
        "fc": hasattr(inner, "fc"),
    }


def main(request: dict) -> None:
    from fixes_probe import register_dflash2_alias_if_missing

    register_dflash2_alias_if_missing()
    # The draft's MLP calls vLLM's compiled op, which CPU builds lack.
    stub_silu_and_mul()
    emit({draft: attempt(lambda d=draft: built(request["models"], d))
          for draft in request["drafts"]})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
