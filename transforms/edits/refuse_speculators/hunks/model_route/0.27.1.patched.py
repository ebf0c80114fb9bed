# The backport reads DFlash2 drafts in their own format only: refused
# here in one line, not in a validation error that lists methods.
if result["method"] == "dflash2":
    raise NotImplementedError(
        "Speculators-format dflash2 checkpoints are not read by this DFlash2 "
        "backport to vLLM 0.27.1, which reads a DFlash2 draft in its own format "
        "(architectures ['DFlash2DraftModel']); vLLM 0.29.0 is the first release "
        "that reads the Speculators format for DFlash2"
    )
