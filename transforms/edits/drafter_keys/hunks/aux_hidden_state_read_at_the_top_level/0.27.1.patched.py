self.use_aux_hidden_state = drafter_config.get(
    "use_aux_hidden_state",
    getattr(self.config, "use_aux_hidden_state", True),
)
