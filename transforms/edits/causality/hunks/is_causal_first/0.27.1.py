def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
    """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
    override = (getattr(config, "dflash_config", None) or {}).get("causal")
    if override is not None:
        return override
    layer_types = getattr(config, "layer_types", None)
    return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
