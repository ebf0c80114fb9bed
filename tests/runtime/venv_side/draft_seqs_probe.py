"""How many requests 0.27.1's scheduler runs at once with a DFlash draft, and
what the DFlash draft pass then writes: observed in one interpreter.

Run by tests/runtime/test_runtime_draft_seqs_cap.py in 0.27.1 as it ships,
patched by `apply --only-pr` and patched by `apply`. argv[1] is a JSON
object: the tiny model directories ("models") and the engine's sizes.

* `engine`: the engine config `EngineArgs` builds (`max_num_seqs`,
  `max_num_scheduled_tokens`), for a DFlash2 and a DFlash1 draft.
* `schedule`: 0.27.1's own `Scheduler`, given that config and a burst of
  one-token prompts, schedules one step: the requests and tokens it takes.
* `dummy_run`: the runner's own `_dummy_run` (the memory-profiling and
  warm-up pass, which no scheduler sizes), on a runner sized from the engine
  config `EngineArgs` builds for a DFlash2 draft (`dummy_sizes`): the
  requests of the batch it makes, up to `execute_model`.
* `prepare`: the release's `prepare_dflash_inputs` (Triton's interpreter) run
  for that many requests into input buffers of `max_num_batched_tokens`
  rows, as `DraftModelSpeculator` sizes them, each buffer the head of a
  larger tensor: the rows it writes past the buffer's end.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from runtime_guest import attempt, emit, use_triton_interpreter

GUARD = -7


def engine_config(models, draft, k, max_num_seqs, max_num_batched_tokens):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=models["target"], skip_tokenizer_init=True, max_model_len=2048,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        speculative_config={"method": "dflash", "model": models[draft],
                            "num_speculative_tokens": k},
    ).create_engine_config()


def engine(models, draft, k, max_num_seqs, max_num_batched_tokens):
    config = engine_config(models, draft, k, max_num_seqs, max_num_batched_tokens)
    scheduler = config.scheduler_config
    return {
        "max_num_seqs": scheduler.max_num_seqs,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "max_num_scheduled_tokens": scheduler.max_num_scheduled_tokens,
    }


def schedule(models, draft, k, max_num_seqs, max_num_batched_tokens, prompts):
    """One step of 0.27.1's scheduler over `prompts` one-token prompts."""
    import torch

    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    config = engine_config(models, draft, k, max_num_seqs, max_num_batched_tokens)
    block_size = config.cache_config.block_size
    num_blocks = 4 * prompts + 16
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    config.cache_config.num_gpu_blocks = num_blocks
    scheduler = Scheduler(
        vllm_config=config, kv_cache_config=kv_cache_config, block_size=block_size,
        structured_output_manager=StructuredOutputManager(config), log_stats=False,
    )
    for i in range(prompts):
        params = SamplingParams(max_tokens=8)
        params.update_from_generation_config({}, 0)
        scheduler.add_request(Request(
            request_id=f"r{i}", prompt_token_ids=[1 + i % 500], sampling_params=params,
            pooling_params=None,
        ))
    output = scheduler.schedule()
    return {
        "requests": len(output.num_scheduled_tokens),
        "tokens": output.total_num_scheduled_tokens,
        "max_num_running_reqs": scheduler.max_num_running_reqs,
    }


class _StopDummyRun(Exception):
    pass


def dummy_run(models, draft, k, max_num_seqs, max_num_batched_tokens):
    """The batch 0.27.1's `GPUModelRunner._dummy_run` makes for a profile run
    of `max_num_batched_tokens` tokens, on a runner sized as its `__init__`
    sizes it from the config (`max_num_reqs = max_num_seqs`)."""
    from contextlib import nullcontext

    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    config = engine_config(models, draft, k, max_num_seqs, max_num_batched_tokens)
    seen = {}

    def execute_model(scheduler_output, **kwargs):
        seen["output"] = scheduler_output
        raise _StopDummyRun

    runner = SimpleNamespace(
        max_num_reqs=config.scheduler_config.max_num_seqs,
        max_num_tokens=config.scheduler_config.max_num_batched_tokens,
        decode_query_len=1,
        kv_connector=SimpleNamespace(set_disabled=lambda disabled: None),
        is_first_pp_rank=True,
        lora_config=None,
        maybe_dummy_run_with_lora=lambda *args, **kwargs: nullcontext(),
        execute_model=execute_model,
    )
    try:
        GPUModelRunner._dummy_run(runner, num_tokens=runner.max_num_tokens, is_profile=True)
    except _StopDummyRun:
        pass
    output = seen["output"]
    return {"requests": len(output.num_scheduled_tokens),
            "tokens": output.total_num_scheduled_tokens}


def prepare(num_reqs, k, max_num_reqs, max_num_tokens, block_size=16):
    """0.27.1's prepare-inputs launcher for `num_reqs` requests with one
    context token each, into buffers of `max_num_tokens` rows: how many rows
    past that end each buffer takes."""
    import numpy as np
    import torch

    from runtime_guest import prepare_dflash_inputs

    num_query = k + 1
    spare = num_reqs * num_query + 64

    def guarded(dtype):
        whole = torch.full((max_num_tokens + spare,), GUARD, dtype=dtype)
        return whole, whole[:max_num_tokens]

    ids, input_ids = guarded(torch.int32)
    pos, positions = guarded(torch.int64)
    slots, query_slots = guarded(torch.int64)
    buffers = SimpleNamespace(
        input_ids=input_ids, positions=positions,
        query_start_loc=torch.zeros(max_num_reqs + 1, dtype=torch.int32),
        seq_lens=torch.zeros(max_num_reqs, dtype=torch.int32),
    )
    batch = SimpleNamespace(
        num_reqs=num_reqs,
        num_scheduled_tokens=np.ones(num_reqs, dtype=np.int32),
        positions=torch.zeros(num_reqs, dtype=torch.int64),
        query_start_loc=torch.arange(num_reqs + 1, dtype=torch.int32),
        idx_mapping=torch.arange(num_reqs, dtype=torch.int32),
    )
    samples = max_num_reqs * k
    prepare_dflash_inputs(
        input_buffers=buffers,
        query_slot_mapping=query_slots,
        context_positions=torch.zeros(max_num_tokens, dtype=torch.int64),
        context_slot_mapping=torch.zeros(max_num_tokens, dtype=torch.int64),
        sample_indices=torch.zeros(samples, dtype=torch.int64),
        sample_pos=torch.zeros(samples, dtype=torch.int64),
        sample_idx_mapping=torch.zeros(samples, dtype=torch.int32),
        temperature=torch.zeros(max_num_reqs),
        seeds=torch.zeros(max_num_reqs, dtype=torch.int64),
        input_batch=batch,
        num_sampled=torch.ones(num_reqs, dtype=torch.int32),
        num_rejected=torch.zeros(num_reqs, dtype=torch.int32),
        last_sampled=torch.full((max_num_reqs,), 5, dtype=torch.int64),
        next_prefill_tokens=torch.zeros(max_num_reqs, dtype=torch.int64),
        input_temperature=torch.zeros(max_num_reqs),
        input_seeds=torch.zeros(max_num_reqs, dtype=torch.int64),
        block_table=torch.ones(num_reqs, 4, dtype=torch.int32),
        block_size=block_size,
        parallel_drafting_token_id=123,
        num_query_per_req=num_query,
        num_speculative_steps=k,
        max_num_reqs=max_num_reqs,
        max_num_tokens=max_num_tokens,
        max_model_len=2048,
    )
    return {
        name: int((whole[max_num_tokens:] != GUARD).sum())
        for name, whole in (("input_ids", ids), ("positions", pos), ("query_slots", slots))
    }


def main(request: dict) -> None:
    from fixes_probe import register_dflash2_alias_if_missing

    use_triton_interpreter()
    register_dflash2_alias_if_missing()
    models, sizes, prompts = request["models"], request["sizes"], request["prompts"]
    results = {}
    for draft in ("dflash2", "dflash1-full"):
        results[draft] = {
            "engine": attempt(lambda d=draft: engine(models, d, **sizes)),
            "schedule": attempt(lambda d=draft: schedule(models, d, prompts=prompts, **sizes)),
        }
    results["dummy_run"] = attempt(lambda: dummy_run(models, "dflash2", **request["dummy_sizes"]))
    scheduled = results["dflash2"]["schedule"]
    if scheduled["ok"]:
        seen = results["dflash2"]["engine"]["value"]
        results["prepare"] = attempt(lambda: prepare(
            scheduled["value"]["requests"], sizes["k"], seen["max_num_seqs"],
            seen["max_num_batched_tokens"],
        ))
    emit(results)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
