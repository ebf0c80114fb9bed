def _cap_dflash_draft_seqs(self) -> None:
    """Cap the requests that run at once to what a DFlash draft pass has
    rows for: num_speculative_tokens + 1 query rows each, in buffers of
    max_num_batched_tokens rows."""
    spec = self.speculative_config
    if spec is None or spec.method != "dflash" or not spec.num_speculative_tokens:
        return
    query_rows = spec.num_speculative_tokens + 1
    max_num_batched_tokens = self.scheduler_config.max_num_batched_tokens
    max_draft_seqs = max_num_batched_tokens // query_rows
    max_num_seqs = self.scheduler_config.max_num_seqs
    if max_draft_seqs >= max_num_seqs:
        return
    if max_draft_seqs == 0:
        raise ValueError(
            f"The DFlash draft pass needs {query_rows} query tokens per request, "
            f"more than max_num_batched_tokens={max_num_batched_tokens}. Increase "
            "max_num_batched_tokens or decrease num_speculative_tokens."
        )
    logger.warning_once(
        "The DFlash draft pass needs %d query tokens per request within "
        "max_num_batched_tokens=%d. Overriding max_num_seqs from %d to %d.",
        query_rows,
        max_num_batched_tokens,
        max_num_seqs,
        max_draft_seqs,
    )
    self.scheduler_config.max_num_seqs = max_draft_seqs
