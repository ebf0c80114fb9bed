self.model = self.model_cls(
    vllm_config=vllm_config,
    prefix=maybe_prefix(prefix, "model"),
    start_layer_id=target_layer_num,
)
