
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
    DFlashSpeculator,
)

return DFlashSpeculator(vllm_config, device)
