"""What the upstream fixes the backport carries change in a running vLLM,
observed in one interpreter (Triton's interpreter for the kernels).

Run by tests/runtime/test_runtime_worker_fixes.py (and the chi-square test)
in the pristine 0.27.1, the patched one and the one with the DFlash2 PR's
edits alone; argv[1] is a JSON object naming the checks to run and their
parameters. Each check reports what it saw, or the error it met: on a vLLM
without a fix, an error is an observation too.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from runtime_guest import attempt, emit, use_triton_interpreter

SALT = 1 << 30


# -- the DFlash prepare-inputs kernel ------------------------------------------


def prepare_inputs(target_positions, num_rejected, block_table, block_size,
                   num_speculative_steps, max_model_len, sample_from_anchor=False):
    """One request through the release's `prepare_dflash_inputs` launcher:
    the slots and positions it writes for the context and the query rows."""
    import numpy as np
    import torch

    from vllm.v1.attention.backends.utils import PAD_SLOT_ID
    from runtime_guest import prepare_dflash_inputs

    max_num_reqs, max_num_tokens = 4, 32
    num_ctx = len(target_positions)
    num_query = 1 + num_speculative_steps
    buffers = SimpleNamespace(
        input_ids=torch.full((max_num_tokens,), -1, dtype=torch.int32),
        positions=torch.full((max_num_tokens,), -1, dtype=torch.int64),
        query_start_loc=torch.full((max_num_reqs + 1,), -1, dtype=torch.int32),
        seq_lens=torch.full((max_num_reqs,), -1, dtype=torch.int32),
    )
    batch = SimpleNamespace(
        num_reqs=1,
        num_scheduled_tokens=np.array([num_ctx], dtype=np.int32),
        positions=torch.tensor(target_positions, dtype=torch.int64),
        query_start_loc=torch.tensor([0, num_ctx], dtype=torch.int32),
        idx_mapping=torch.tensor([1], dtype=torch.int32),
    )
    query_slots = torch.full((max_num_tokens,), -2, dtype=torch.int64)
    context_positions = torch.full((max_num_tokens,), -1, dtype=torch.int64)
    context_slots = torch.full((max_num_tokens,), -2, dtype=torch.int64)
    sample_indices = torch.full((max_num_reqs * num_speculative_steps,), -1, dtype=torch.int64)
    sample_pos = torch.full_like(sample_indices, -1)
    sample_idx_mapping = torch.full(sample_indices.shape, -1, dtype=torch.int32)
    prepare_dflash_inputs(
        input_buffers=buffers,
        query_slot_mapping=query_slots,
        context_positions=context_positions,
        context_slot_mapping=context_slots,
        sample_indices=sample_indices,
        sample_pos=sample_pos,
        sample_idx_mapping=sample_idx_mapping,
        temperature=torch.zeros(max_num_reqs),
        seeds=torch.zeros(max_num_reqs, dtype=torch.int64),
        input_batch=batch,
        num_sampled=torch.tensor([1], dtype=torch.int32),
        num_rejected=torch.tensor([num_rejected], dtype=torch.int32),
        last_sampled=torch.tensor([0, 77, 0, 0], dtype=torch.int64),
        next_prefill_tokens=torch.zeros(max_num_reqs, dtype=torch.int64),
        input_temperature=torch.tensor([0.0, 1.0, 0.0, 0.0]),
        input_seeds=torch.tensor([0, 5, 0, 0], dtype=torch.int64),
        block_table=torch.tensor([block_table], dtype=torch.int32),
        block_size=block_size,
        parallel_drafting_token_id=123,
        num_query_per_req=num_query,
        num_speculative_steps=num_speculative_steps,
        max_num_reqs=max_num_reqs,
        max_num_tokens=max_num_tokens,
        max_model_len=max_model_len,
        sample_from_anchor=sample_from_anchor,
    )
    written = [s for s in context_slots[:num_ctx].tolist() + query_slots[:num_query].tolist()
               if s != PAD_SLOT_ID]
    return {
        "pad_slot_id": PAD_SLOT_ID,
        "context_positions": context_positions[:num_ctx].tolist(),
        "context_slots": context_slots[:num_ctx].tolist(),
        "query_positions": buffers.positions[:num_query].tolist(),
        "query_slots": query_slots[:num_query].tolist(),
        "seq_len": int(buffers.seq_lens[0]),
        # Block 0 holds slots [0, block_size): the null block.
        "writes_null_block": any(0 <= s < block_size for s in written),
    }


# -- FlashAttention's AOT schedule for the draft's groups ----------------------


def aot_schedule(speculator: str):
    """`aot_schedule` of the draft's metadata builders after `set_attn`: a
    sliding-window group and a full-attention group on FlashAttention, and a
    sliding-window group on a builder without the flag (Triton's)."""
    import importlib

    import torch

    import vllm.v1.attention.backends.flash_attn as flash_attn
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    module, name = speculator.rsplit(":", 1)
    cls = getattr(importlib.import_module(module), name)
    common = dict(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)

    def builder(spec, flashattention=True):
        if flashattention:
            built = object.__new__(flash_attn.FlashAttentionMetadataBuilder)
            built.aot_schedule = True
        else:
            built = SimpleNamespace()
        built.kv_cache_spec = spec
        return built

    sliding = builder(SlidingWindowSpec(sliding_window=32, **common))
    full = builder(FullAttentionSpec(**common))
    other = builder(SlidingWindowSpec(sliding_window=32, **common), flashattention=False)
    groups = [[SimpleNamespace(get_metadata_builder=lambda b=b: b)] for b in (sliding, full, other)]

    def base_set_attn(self, *args):
        # What the base class leaves for DFlash's own set_attn: the groups.
        self.attn_groups = groups

    DraftModelSpeculator.set_attn = base_set_attn
    instance = object.__new__(cls)
    instance.max_num_tokens = 8
    instance.device = torch.device("cpu")
    instance.requires_non_causal = True
    instance.model = object()
    cls.set_attn(instance, None, None, None, None, None)
    return {
        "sliding_window_aot": sliding.aot_schedule,
        "full_attention_aot": full.aot_schedule,
        "other_builder_has_flag": hasattr(other, "aot_schedule"),
    }


# -- prefix-cache hits --------------------------------------------------------


def prefix_cache_hits(models, draft, method=None, prompt_tokens=64, block_size=16):
    """Tokens a second request with the same prompt finds in the prefix cache
    once the first is scheduled, with a DFlash draft (`method` switches the
    method in place afterwards, as upstream's scheduler tests do)."""
    import torch

    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    speculative = (
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
        if draft is None
        else {"method": "dflash", "model": str(models[draft]), "num_speculative_tokens": 3}
    )
    config = EngineArgs(
        model=str(models["target"]), skip_tokenizer_init=True, max_model_len=256,
        max_num_seqs=8, block_size=block_size, enable_prefix_caching=True,
        speculative_config=speculative,
    ).create_engine_config()
    if method is not None:
        object.__setattr__(config.speculative_config, "method", method)
    num_blocks = 64
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
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)

    def request(name):
        params = SamplingParams(max_tokens=8)
        params.update_from_generation_config({}, 0)
        return Request(request_id=name, prompt_token_ids=list(range(1, prompt_tokens + 1)),
                       sampling_params=params, pooling_params=None, block_hasher=hasher)

    scheduler.add_request(request("first"))
    scheduler.schedule()
    hit = scheduler.kv_cache_manager.get_computed_blocks(request("second"))[1]
    return {
        "method": config.speculative_config.method,
        "cached_tokens": hit,
        "block_drop": bool(getattr(scheduler, "use_eagle_block_drop", scheduler.use_eagle)),
    }


# -- the draft's Gumbel noise -------------------------------------------------


def _rows(torch, rows, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 2.0
    seeds = torch.randint(0, 2**62, (rows,), generator=g)
    positions = torch.randint(0, 100_000, (rows,), generator=g)
    temperature = (torch.rand(rows, generator=g) + 0.5).float()
    return logits, seeds, positions, temperature


def _agreement(a, b) -> float:
    return float((a == b).float().mean())


def draft_model_draws(rows=128, vocab=64, seed=3):
    """`DraftModelSpeculator.sample_draft`'s probabilistic draw (DFlash1,
    EAGLE and MTP draft through it) against 0.27.1's own `gumbel_sample`
    keyed at the same position (the stream verification resamples with) and
    at that position plus the salt."""
    import inspect

    import torch

    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    logits, seeds, positions, temperature = _rows(torch, rows, vocab, seed)
    mapping = torch.arange(rows, dtype=torch.int32)
    concrete = type("Drafter", (DraftModelSpeculator,), {
        name: lambda *args, **kwargs: None for name in DraftModelSpeculator.__abstractmethods__
    })
    speculator = object.__new__(concrete)
    speculator.model = SimpleNamespace(compute_logits=lambda hidden: hidden.clone())
    speculator.use_fp64_gumbel = False
    cache = torch.zeros(rows, 1, vocab)
    drafted = speculator.sample_draft(
        logits, positions, mapping, temperature, seeds,
        torch.zeros((), dtype=torch.int64), cache,
    )
    # sample_draft keys its draw by positions + 1.
    same_stream = gumbel_sample(logits, mapping, temperature, seeds, positions + 1,
                                apply_temperature=True)
    salted = gumbel_sample(logits, mapping, temperature, seeds, positions + 1 + SALT,
                           apply_temperature=True)
    return {
        "gumbel_sample_takes_is_drafting":
            "is_drafting" in inspect.signature(gumbel_sample).parameters,
        "equal_to_verification_stream": _agreement(drafted, same_stream),
        "equal_to_salted_stream": _agreement(drafted, salted),
    }


def gumbel_draft_stream(rows=128, vocab=64, seed=4):
    """`gumbel_sample(..., is_drafting=True)` against the same call keyed at
    the position plus the salt, and at the position itself."""
    import torch

    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

    logits, seeds, positions, temperature = _rows(torch, rows, vocab, seed)
    mapping = torch.arange(rows, dtype=torch.int32)

    def draw(pos, **flag):
        return gumbel_sample(logits, mapping, temperature, seeds, pos,
                             apply_temperature=True, **flag)

    drafting = draw(positions, is_drafting=True)
    return {
        "equal_to_salted": _agreement(drafting, draw(positions + SALT)),
        "equal_to_unsalted": _agreement(drafting, draw(positions)),
        "flag_off_is_0271": _agreement(draw(positions, is_drafting=False), draw(positions)),
    }


def _walk(torch, scores, candidates, sample_pos, slots, temperature, seeds, top_k):
    from vllm.triton_utils import triton
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as dflash2

    num_reqs, num_steps = candidates.shape[:2]
    tokens = torch.full((num_reqs, num_steps), -1, dtype=torch.int64)
    realized = torch.zeros(num_reqs, num_steps, top_k)
    dflash2._selector_walk_kernel[(num_reqs,)](
        scores.contiguous(), candidates.contiguous(), sample_pos,
        slots.repeat_interleave(num_steps), temperature, seeds, tokens, realized,
        num_steps=num_steps, top_k=top_k, BLOCK_K=triton.next_power_of_2(top_k),
        SAMPLE_PROBABILISTIC=True, USE_FP64=False, num_warps=1,
    )
    return tokens, realized


def walk_draws(rows=128, vocab=64, top_k=8, seed=5):
    """The DFlash2 walk's first draw (one step, so its edge row is known)
    against 0.27.1's `gumbel_sample` over the same scores laid out on the
    vocabulary, keyed at Q - 1 as verification keys the token at Q, with and
    without the salt."""
    import torch

    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

    g = torch.Generator().manual_seed(seed)
    candidates = torch.stack([torch.randperm(vocab, generator=g)[:top_k] for _ in range(rows)])
    scores = torch.randn(rows, 1, top_k, top_k, generator=g) * 2.0
    seeds = torch.randint(0, 2**62, (rows,), generator=g)
    temperature = (torch.rand(rows, generator=g) + 0.5).float()
    sample_pos = torch.randint(1, 100_000, (rows,), generator=g)
    slots = torch.arange(rows, dtype=torch.int32)
    tokens, _ = _walk(torch, scores, candidates[:, None], sample_pos, slots, temperature,
                      seeds, top_k)
    logits = torch.full((rows, vocab), float("-inf"))
    logits.scatter_(1, candidates, scores[:, 0, 0])

    def verification(pos):
        return gumbel_sample(logits, slots, temperature, seeds, pos, apply_temperature=True)

    return {
        "equal_to_verification_stream": _agreement(tokens[:, 0], verification(sample_pos - 1)),
        "equal_to_salted_stream": _agreement(tokens[:, 0], verification(sample_pos - 1 + SALT)),
    }


def walk_chi_square(target, draft, trials, seed=0):
    """Probabilistic DFlash2 drafting through 0.27.1's verification: the walk
    draws one token per trial from `draft` (every vocabulary token a
    candidate), the draft-logit cache takes its distribution, and 0.27.1's
    `rejection_sample` accepts it or resamples. The accepted token must
    follow softmax(`target`): Pearson's statistic against it."""
    import time

    import torch

    from vllm.triton_utils import triton
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as dflash2
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    started = time.monotonic()
    target = torch.tensor(target)
    draft = torch.tensor(draft)
    vocab = target.numel()
    n = trials
    torch.manual_seed(seed)
    # Verification reads logit row t*2 for trial t's draft and keys its
    # resample by pos[t*2]; the drafted token sits one position later.
    pos = torch.arange(2 * n, dtype=torch.int64) + 1000
    sample_pos = pos[0::2] + 1
    slots = torch.arange(n, dtype=torch.int32)
    seeds = torch.arange(n, dtype=torch.int64) * 7919 + seed
    temperature = torch.ones(n)
    candidates = torch.arange(vocab).expand(n, 1, vocab).contiguous()
    scores = draft.view(1, 1, 1, vocab).expand(n, 1, vocab, vocab).contiguous()
    tokens, realized = _walk(torch, scores, candidates, sample_pos, slots, temperature,
                             seeds, vocab)
    draft_logits = torch.full((n, 1, vocab), float("-inf"))
    dflash2._cache_draft_logits_kernel[(n,)](
        draft_logits, torch.zeros(n, 1, vocab, dtype=torch.int64), candidates.view(n, vocab),
        realized.view(n, vocab), slots, draft_logits.stride(0), draft_logits.stride(1),
        num_steps=1, top_k=vocab, BLOCK_K=triton.next_power_of_2(vocab), num_warps=1,
    )
    drafted = time.monotonic()
    draft_sampled = torch.zeros(2 * n, dtype=torch.int64)
    draft_sampled[1::2] = tokens[:, 0]
    sampled, num_sampled = rejection_sample(
        target_logits=target.expand(2 * n, vocab).contiguous(),
        draft_logits=draft_logits,
        draft_sampled=draft_sampled,
        cu_num_logits=torch.arange(n + 1, dtype=torch.int32) * 2,
        pos=pos,
        idx_mapping=slots,
        expanded_idx_mapping=slots.repeat_interleave(2),
        expanded_local_pos=torch.arange(2, dtype=torch.int32).repeat(n),
        temperature=temperature,
        seed=seeds,
        num_speculative_steps=1,
    )
    first = sampled[:, 0]
    counts = torch.bincount(first, minlength=vocab).double()
    expected = torch.softmax(target.double(), 0) * n
    statistic = float(((counts - expected) ** 2 / expected).sum())
    return {
        "statistic": statistic,
        "dof": vocab - 1,
        "accepted": float((tokens[:, 0] == first).double().mean()),
        "drafted_follows_draft": float(((torch.bincount(tokens[:, 0], minlength=vocab).double()
                                         - torch.softmax(draft.double(), 0) * n) ** 2
                                        / (torch.softmax(draft.double(), 0) * n)).sum()),
        "seconds": {"draft": round(drafted - started, 1),
                    "verify": round(time.monotonic() - drafted, 1)},
    }


CHECKS = {f.__name__: f for f in (
    prepare_inputs, aot_schedule, prefix_cache_hits, draft_model_draws,
    gumbel_draft_stream, walk_draws, walk_chi_square,
)}


def main(request: dict) -> None:
    use_triton_interpreter()
    models = request.get("models")
    results = {}
    for name, (check, params) in request["checks"].items():
        if check == "prefix_cache_hits":
            params = {**params, "models": models}
        results[name] = attempt(lambda c=check, p=params: CHECKS[c](**p))
        results[name].pop("traceback", None) if results[name]["ok"] else None
    emit(results)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
