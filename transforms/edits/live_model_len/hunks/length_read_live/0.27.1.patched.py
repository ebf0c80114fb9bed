self.max_num_tokens = self.scheduler_config.max_num_batched_tokens
self.draft_max_seq_len = self.max_model_len
