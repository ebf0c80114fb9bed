class DraftModelSpeculator(BaseSpeculator):
    @property
    def max_model_len(self) -> int:
        # Auto-fit can lower the limit after the speculator is built.
        return self.vllm_config.model_config.max_model_len
