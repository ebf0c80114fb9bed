def sample_draft(
    self,
    hidden_states: torch.Tensor,
    positions: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    draft_step: torch.Tensor,
    draft_logits: torch.Tensor | None,
) -> torch.Tensor:
    if draft_logits is not None:
        logits = self.model.compute_logits(hidden_states)
        # NOTE(woosuk): We must add 1 to the positions to match the Gumbel noise
        # used for draft and target sampling.
        return gumbel_sample(
            logits,
            idx_mapping,
            temperature,
            seeds,
            positions + 1,
            apply_temperature=True,
            output_processed_logits=draft_logits,
            output_processed_logits_col=draft_step,
            use_fp64=self.use_fp64_gumbel,
        )
    return self._greedy_sample_draft(hidden_states)
