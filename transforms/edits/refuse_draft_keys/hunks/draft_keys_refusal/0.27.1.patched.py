def _refuse_dflash2_draft_keys(self) -> None:
    """Refuse, in one line, a DFlash2 draft whose config sets a key that
    changes the draft's attention and that vLLM 0.27.1 does not read."""
    spec = self.speculative_config
    if spec is None or spec.method != "dflash" or spec.draft_model_config is None:
        return
    draft = spec.draft_model_config
    if "DFlash2DraftModel" not in (draft.architectures or []):
        return
    hf_config = draft.hf_config
    dflash_config = getattr(hf_config, "dflash_config", None) or {}
    value_scale = dflash_config.get("attention_value_scale")
    if value_scale is not None and value_scale != 1:
        raise NotImplementedError(
            f"DFlash2 draft {draft.model} sets dflash_config.attention_value_scale "
            f"({value_scale}): this DFlash2 backport to vLLM 0.27.1 does not scale "
            "the draft's attention values; vLLM 0.31.0 is the first release that "
            "reads the key"
        )
    if getattr(hf_config, "is_neox_style", True) is not True:
        raise NotImplementedError(
            f"DFlash2 draft {draft.model} sets is_neox_style "
            f"({hf_config.is_neox_style}): this DFlash2 backport to vLLM 0.27.1 "
            "applies neox-style rotary embeddings to every draft; vLLM 0.29.0 is "
            "the first release that reads the key from the draft's config"
        )
