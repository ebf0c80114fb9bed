def draft_shares_target_positions(self) -> bool:
    """Whether the draft's max_position_embeddings is raised to the target's
    max_model_len, so that the draft's length does not limit the target's:
    an EAGLE draft always (as in 0.27.1), a DFlash draft where its RoPE
    types only size the rotary cache (as in 0.33.0)."""
    if self.draft_model_config is None:
        return False
    if self.method in ("eagle", "eagle3"):
        return True
    return self.method == "dflash" and _rope_only_sizes_cache(
        self.draft_model_config.hf_config
    )
