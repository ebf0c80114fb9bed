self.layers = nn.ModuleList(
    [
        DFlashQwen3DecoderLayer(
            current_vllm_config,
            config=self.config,
            layer_idx=layer_idx,
            cache_config=current_vllm_config.cache_config,
            quant_config=self.quant_config,
            prefix=maybe_prefix(prefix, f"layers.{layer_idx + start_layer_id}"),
        )
        for layer_idx in range(self.config.num_hidden_layers)
    ]
)
