def _limit_max_model_len_to_draft(self) -> None:
    """Lower max_model_len to a DFlash draft's on the V2 model runner, which
    cannot serve longer sequences where the draft's max_position_embeddings
    was not raised to the target's (its RoPE derives from it)."""
    spec_config = self.speculative_config
    if (
        spec_config is None
        or spec_config.method != "dflash"
        or spec_config.draft_model_config is None
        or self.model_config is None
        or not self.use_v2_model_runner
        or spec_config.draft_shares_target_positions()
    ):
        return
    draft_max_model_len = spec_config.draft_model_config.max_model_len
    target_max_model_len = self.model_config.max_model_len
    if draft_max_model_len >= target_max_model_len:
        return
    logger.warning(
        "The draft model's max_model_len (%d) is smaller than the target "
        "model's (%d) and the V2 model runner can't skip speculation for "
        "longer sequences; reducing max_model_len to %d.",
        draft_max_model_len,
        target_max_model_len,
        draft_max_model_len,
    )
    self.model_config.max_model_len = draft_max_model_len
