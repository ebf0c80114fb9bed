@staticmethod
def _maybe_override_draft_max_position_embeddings(
    draft_hf_config: PretrainedConfig,
    target_max_model_len: int,
) -> None:
    """Raise a draft's max_position_embeddings up to the target's
    max_model_len where its RoPE only sizes the rotary cache.

    The V2 DFlash speculator feeds the draft positions up to the target's
    max_model_len, while max_position_embeddings sizes the draft's
    cos_sin_cache: a smaller value makes that gather go out of bounds.
    vLLM 0.33.0's helper; in this release only DFlash drafts call it.
    """
    draft_max_position_embeddings = getattr(
        draft_hf_config, "max_position_embeddings", None
    )
    if (
        draft_max_position_embeddings is None
        or draft_max_position_embeddings >= target_max_model_len
    ):
        return
    if not _rope_only_sizes_cache(draft_hf_config):
        # The draft's RoPE reads max_position_embeddings for more than the size
        # of its cache, so raising it would change the draft; VllmConfig limits
        # max_model_len to the draft's instead.
        return
    logger.info(
        "Overriding draft model max_position_embeddings from %d to the "
        "target model's max_model_len (%d); the draft shares the target's "
        "positional space.",
        draft_max_position_embeddings,
        target_max_model_len,
    )
    draft_hf_config.max_position_embeddings = target_max_model_len
