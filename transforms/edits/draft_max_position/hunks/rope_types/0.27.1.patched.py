# RoPE types whose get_rope reads max_position_embeddings only to size the
# cos_sin_cache: raising it changes no rotary frequency. The others size the
# cache from original_max_position_embeddings (yarn, deepseek_yarn) or derive
# frequencies from it (dynamic, longrope).
_CACHE_ONLY_ROPE_TYPES = frozenset(
    {"default", "linear", "llama3", "ntk", "proportional"}
)


def _rope_only_sizes_cache(hf_config: "PretrainedConfig") -> bool:
    """Whether every RoPE the config declares (one, or one per layer type)
    reads max_position_embeddings only to size its cache."""
    from vllm.transformers_utils.config import is_rope_parameters_nested

    rope_parameters = getattr(hf_config, "rope_parameters", None)
    if not isinstance(rope_parameters, dict):
        return True
    if is_rope_parameters_nested(rope_parameters):
        every = [p for p in rope_parameters.values() if isinstance(p, dict) and p]
    else:
        every = [rope_parameters] if rope_parameters else []
    return all(p.get("rope_type", "default") in _CACHE_ONLY_ROPE_TYPES for p in every)
