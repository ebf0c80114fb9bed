def _refuse_dflash2_vocabulary_mismatch(self) -> None:
    """Refuse, in one line, a DFlash2 draft whose vocabulary is not the
    target's: its candidate selector indexes the draft's codebooks with the
    target head's token ids."""
    spec = self.speculative_config
    if (
        spec is None
        or spec.method != "dflash"
        or spec.draft_model_config is None
        or self.model_config is None
    ):
        return
    draft = spec.draft_model_config
    if "DFlash2DraftModel" not in (draft.architectures or []):
        return
    target_vocab_size = self.model_config.get_vocab_size()
    draft_vocab_size = draft.get_vocab_size()
    if draft_vocab_size != target_vocab_size:
        lifted = (
            "vLLM 0.34.0 is the first release that serves a draft vocabulary "
            "smaller than the target's"
            if draft_vocab_size < target_vocab_size
            else "vLLM 0.34.0 serves only a draft vocabulary no larger than "
            "the target's"
        )
        raise NotImplementedError(
            f"DFlash2 draft {draft.model} has a vocabulary of "
            f"{draft_vocab_size} tokens and the target {target_vocab_size}: "
            "this DFlash2 backport to vLLM 0.27.1 needs them equal; "
            f"{lifted}"
        )
    reduced = getattr(draft.hf_config, "draft_vocab_size", None)
    if reduced is not None and reduced != draft_vocab_size:
        raise NotImplementedError(
            f"DFlash2 draft {draft.model} declares a reduced draft vocabulary "
            f"(draft_vocab_size {reduced} of {draft_vocab_size}): this DFlash2 "
            "backport to vLLM 0.27.1 drafts over the whole vocabulary, and no "
            "vLLM release through 0.34.0 maps a reduced one for DFlash2"
        )
