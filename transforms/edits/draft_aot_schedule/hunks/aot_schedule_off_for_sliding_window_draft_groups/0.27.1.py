super().set_attn(
    model_state,
    kv_cache_config,
    block_tables,
    target_input_buffers,
    target_attn_groups,
)
