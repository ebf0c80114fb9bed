def _refuse_quantized_dflash2_draft(self) -> None:
    """Refuse a quantized DFlash2 draft in one line, before it is loaded."""
    spec = self.speculative_config
    if spec is None or spec.method != "dflash" or spec.draft_model_config is None:
        return
    draft = spec.draft_model_config
    if "DFlash2DraftModel" not in (draft.architectures or []):
        return
    if draft.quantization is not None:
        raise NotImplementedError(
            f"DFlash2 draft {draft.model} is quantized ({draft.quantization}): "
            "this DFlash2 backport to vLLM 0.27.1 serves unquantized drafts "
            "only; vLLM 0.31.0 is the first release that serves quantized ones"
        )
