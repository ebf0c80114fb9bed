
# A DFlash2 draft bakes its block size (num_speculative_tokens + 1) into
# its compiled graph: without it in the key, engines with different
# numbers of speculative tokens would share one compiled artefact.
if (
    self.method == "dflash"
    and self.draft_model_config is not None
    and "DFlash2DraftModel" in (self.draft_model_config.architectures or [])
):
    factors.append(self.num_speculative_tokens)
