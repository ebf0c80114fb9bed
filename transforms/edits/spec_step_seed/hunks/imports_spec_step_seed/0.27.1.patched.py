from vllm.v1.worker.gpu.sample.gumbel import (
    gumbel_block_argmax,
    spec_step_seed,
    tl_rand32,
)
