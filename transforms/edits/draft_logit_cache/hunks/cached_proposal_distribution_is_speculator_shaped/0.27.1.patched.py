dtype, fill = self.draft_logits_spec(vllm_config)
self.draft_logits = torch.full(
    (
        self.max_num_reqs,
        self.num_speculative_steps,
        self.vocab_size,
    ),
    fill,
    dtype=dtype,
    device=device,
)
