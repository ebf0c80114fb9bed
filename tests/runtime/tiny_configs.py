"""Tiny local model directories (config.json only) for vLLM's config layer.

No weights: the runtime checks build configs, registries and single layers,
never load a checkpoint. Sizes are the smallest that vLLM's config validation
accepts, so the directories stay fast to parse.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

VOCAB_SIZE = 1000
HIDDEN_SIZE = 64

TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN_SIZE,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# A mixture-of-experts target: vLLM 0.27.1 runs dense targets on its V2 model
# runner by default but MoE ones on V1, so only behind this target does the
# runner choice show what a draft forces.
MOE_TARGET = {
    **TARGET,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
}

_DRAFT_COMMON = {
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN_SIZE,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "sliding_window": 256,
    "block_size": 4,
}

# A DFlash2 checkpoint as upstream describes it: causality stated at the top
# level, and every layer sliding-window, which 0.27.1's fallback would call
# causal.
DFLASH2_DRAFT = {
    **_DRAFT_COMMON,
    "architectures": ["DFlash2DraftModel"],
    "is_causal": False,
    "layer_types": ["sliding_attention"] * 3,
    "dflash_config": {
        "mask_token_id": 999,
        "target_layer_ids": [0, 2],
        "conv_kernel_size": 3,
        "conv_group_size": 16,
        "selector_rank": 8,
        "selector_top_k": 4,
    },
}

# DFlash1 drafts covering each rule of 0.27.1's `_dflash_layer_causal`, which
# the patched resolver must still answer the same way.
DFLASH1_DRAFTS = {
    "dflash1-full": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["full_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
    "dflash1-mixed": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
    "dflash1-causal-override": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["full_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2],
                          "causal": True},
    },
    "dflash1-noncausal-override": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["sliding_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2],
                          "causal": False},
    },
    "dflash1-no-layer-types": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
}

# 0.27.1's `_dflash_layer_causal` answers, per layer, for each DFlash1 draft.
DFLASH1_CAUSAL = {
    "dflash1-full": [False, False, False],
    "dflash1-mixed": [True, False, True],
    "dflash1-causal-override": [True, True, True],
    "dflash1-noncausal-override": [False, False, False],
    "dflash1-no-layer-types": [False, False, False],
}


def write_models(root: Path) -> dict[str, Path]:
    """Write every tiny model directory under `root`; name -> directory."""
    configs = {"target": TARGET, "moe-target": MOE_TARGET, "dflash2": DFLASH2_DRAFT, **DFLASH1_DRAFTS}
    paths = {}
    for name, config in configs.items():
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(copy.deepcopy(config), indent=2))
        paths[name] = directory
    return paths
