if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
        DFlash2Speculator,
    )

    return DFlash2Speculator(vllm_config, device)

from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
    DFlashSpeculator,
)

return DFlashSpeculator(vllm_config, device)
