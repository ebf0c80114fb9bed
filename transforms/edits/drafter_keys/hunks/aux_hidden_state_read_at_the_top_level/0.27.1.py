if drafter_config is not None and "use_aux_hidden_state" in drafter_config:
    self.use_aux_hidden_state = drafter_config["use_aux_hidden_state"]
else:
    self.use_aux_hidden_state = True
