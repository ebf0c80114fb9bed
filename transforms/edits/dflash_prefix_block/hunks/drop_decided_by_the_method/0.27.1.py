if speculative_config.use_eagle():
    self.use_eagle = True
    self.num_lookahead_tokens = self.num_spec_tokens
