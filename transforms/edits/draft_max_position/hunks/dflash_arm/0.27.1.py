if self.method in ("eagle", "eagle3"):
    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
        self.draft_model_config.hf_config,
        self.target_model_config.max_model_len,
    )
