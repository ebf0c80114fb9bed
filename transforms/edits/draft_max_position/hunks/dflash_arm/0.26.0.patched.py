if self.method == "dflash":
    # A DFlash draft shares the target's positions (#57941). As in
    # 0.33.0, it is raised only where its RoPE types just size the cache;
    # VllmConfig caps max_model_len otherwise.
    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
        self.draft_model_config.hf_config,
        self.target_model_config.max_model_len,
    )
