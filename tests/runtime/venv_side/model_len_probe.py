"""The model length a DFlash speculator bounds its drafts by, after vLLM has
fitted `max_model_len` to the KV cache: observed in one interpreter.

Run by tests/runtime/test_runtime_live_model_len.py in each release as it
ships, patched by `apply --only-pr` and patched by `apply`. argv[1] is a
JSON object: the tiny model directories ("models"), the length the engine
is built with ("max_model_len") and the KV-cache blocks auto-fit is given
memory for ("blocks").

In the order the engine takes: `EngineArgs` builds the config; the V2
runner's `init_speculator` builds the speculator for a DFlash2 draft; the
release's `_auto_fit_max_model_len` (what `max_model_len=-1` runs once the
KV cache's memory is known) fits the length to `blocks` blocks of the
target's attention spec; the worker's `update_max_model_len`, which the
engine core then calls on every worker, hands the fitted length on.
Reported: the fitted length the config holds, and the speculator's
`max_model_len`.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from runtime_guest import attempt, emit


def fitted(models, max_model_len, blocks):
    import torch

    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.kv_cache_utils import _auto_fit_max_model_len
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
    from vllm.v1.worker.gpu.spec_decode import init_speculator
    from vllm.v1.worker.gpu_worker import Worker

    config = EngineArgs(
        model=models["target"], skip_tokenizer_init=True, max_model_len=max_model_len,
        speculative_config={"method": "dflash", "model": models["dflash2"],
                            "num_speculative_tokens": 4},
    ).create_engine_config()
    speculator = init_speculator(config, torch.device("cpu"))
    built_with = speculator.max_model_len
    spec = FullAttentionSpec(block_size=config.cache_config.block_size, num_kv_heads=1,
                             head_size=8, dtype=torch.float32)
    group = KVCacheGroupSpec(["layer"], spec)
    _auto_fit_max_model_len(config, [[group]], [blocks * spec.page_size_bytes])
    length = config.model_config.max_model_len
    Worker.update_max_model_len(
        SimpleNamespace(model_config=config.model_config, model_runner=None), length)
    return {
        "speculator": type(speculator).__name__,
        "built_with": built_with,
        "block_size": config.cache_config.block_size,
        "config": config.model_config.max_model_len,
        "speculator_length": speculator.max_model_len,
    }


def main(request: dict) -> None:
    from fixes_probe import register_dflash2_alias_if_missing

    register_dflash2_alias_if_missing()
    emit({"fitted": attempt(lambda: fitted(
        request["models"], request["max_model_len"], request["blocks"]))})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
