super().set_attn(
    model_state,
    kv_cache_config,
    block_tables,
    target_input_buffers,
    target_attn_groups,
)

# FA3's ahead-of-time split schedule is wrong for a windowed drafter, and
# FlashAttention's builder keeps it on or turns it off depending on the
# windows of the other FlashAttention layers: turn it off here.
for groups in self.attn_groups:
    for group in groups:
        builder = group.get_metadata_builder()
        if getattr(builder, "aot_schedule", False) and (
            get_kv_cache_spec_sliding_window(builder.kv_cache_spec)
        ):
            builder.aot_schedule = False  # type: ignore[attr-defined]
