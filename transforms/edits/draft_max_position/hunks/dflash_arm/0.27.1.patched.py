if self.method in ("eagle", "eagle3"):
    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
        self.draft_model_config.hf_config,
        self.target_model_config.max_model_len,
        any_rope_type=True,
    )

if self.method == "dflash":
    # A DFlash draft shares the target's positions too (#57941). As in
    # 0.33.0, it is raised only where its RoPE types just size the cache;
    # VllmConfig caps max_model_len otherwise. EAGLE keeps 0.27.1's raise.
    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
        self.draft_model_config.hf_config,
        self.target_model_config.max_model_len,
    )
