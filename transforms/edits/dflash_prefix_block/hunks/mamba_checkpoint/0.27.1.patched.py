if self.use_eagle_block_drop:
    last_cache_position = max(last_cache_position - block_size, 0)
