
self.draft_logits = torch.zeros(
    self.max_num_reqs,
    self.num_speculative_steps,
    self.vocab_size,
    dtype=torch.float32,
    device=device,
)
