if self.use_eagle:
    last_cache_position = max(last_cache_position - block_size, 0)
