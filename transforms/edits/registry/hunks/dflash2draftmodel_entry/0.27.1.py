_SPECULATIVE_DECODING_MODELS = {
    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
}
