if speculative_config.use_eagle():
    self.use_eagle = True
    self.num_lookahead_tokens = self.num_spec_tokens
    # DFlash and DSpark build a position's draft KV from the target's
    # hidden state there alone, not from the token after it as EAGLE
    # does: the last block of a prefix-cache hit is theirs to keep.
    self.use_eagle_block_drop = not (
        speculative_config.use_dflash() or speculative_config.use_dspark()
    )
