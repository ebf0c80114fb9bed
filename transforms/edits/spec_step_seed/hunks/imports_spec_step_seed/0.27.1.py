from vllm.v1.worker.gpu.sample.gumbel import gumbel_block_argmax, tl_rand32
