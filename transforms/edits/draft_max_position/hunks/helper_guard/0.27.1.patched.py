if (
    draft_max_position_embeddings is None
    or draft_max_position_embeddings >= target_max_model_len
):
    return
if not any_rope_type and not _rope_only_sizes_cache(draft_hf_config):
    # The draft's RoPE reads max_position_embeddings for more than the size
    # of its cache, so raising it would change the draft; VllmConfig limits
    # max_model_len to the draft's instead.
    return
