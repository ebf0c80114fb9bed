if (
    draft_max_position_embeddings is None
    or draft_max_position_embeddings >= target_max_model_len
):
    return
