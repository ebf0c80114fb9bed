self.mask_token_id = drafter_config.get("mask_token_id")
