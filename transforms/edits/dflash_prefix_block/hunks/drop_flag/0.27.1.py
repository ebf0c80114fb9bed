self.use_eagle = False
