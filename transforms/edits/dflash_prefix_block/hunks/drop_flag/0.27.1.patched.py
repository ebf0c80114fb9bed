self.use_eagle = False
self.use_eagle_block_drop = False
