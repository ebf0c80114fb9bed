draft_sampled_i = gumbel_sample(
    logits_i,
    idx_map[:, i],
    self.temperature,
    self.seeds,
    sample_pos[:, i] - 1,
    apply_temperature=True,
    output_processed_logits=self.draft_logits,
    output_processed_logits_col=self._step_cols[i],
    use_fp64=self.use_fp64_gumbel,
)
