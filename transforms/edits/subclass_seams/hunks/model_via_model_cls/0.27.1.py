self.model = DFlashQwen3Model(
    vllm_config=vllm_config,
    prefix=maybe_prefix(prefix, "model"),
    start_layer_id=target_layer_num,
)
