self.mask_token_id = drafter_config.get(
    "mask_token_id", getattr(self.config, "mask_token_id", None)
)
