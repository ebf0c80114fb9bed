"""`LogitsProcessor.get_top_k_tokens` on a real ParallelLMHead, one TP rank.

Every rank builds the same full head weight from a fixed seed, loads its shard
through vLLM's own weight loader, and compares what the method returns with
torch.topk over the full, unsharded logits. A FlashInfer stand-in is made
importable and reported available, so a CPU run that reached for it would be
seen rather than silently skipped.
"""

from __future__ import annotations

import json
import sys
import types

from runtime_guest import attempt, distributed, emit, probes

# The head and data `dflash2-backport verify` checks at size 1, shared with it.
# The vocabulary is not a multiple of the 64-row padding: the last shard is
# padded.
VOCAB = probes.TOP_K_VOCAB
HIDDEN = probes.TOP_K_HIDDEN
TOKENS = probes.TOP_K_TOKENS
K = probes.TOP_K
full_weight = probes.top_k_weight
hidden_states = probes.top_k_hidden_states

# (scale, soft_cap) pairs. Raw logits here reach about 20: the caps bend the
# top values hard yet leave them distinct in fp32 (a cap that saturates them
# would turn the selection into a tie-break). The last pair sets both, where
# the order of the two matters for the values.
CASES = [(1.0, None), (0.5, None), (1.0, 10.0), (1.7, 15.0)]


def soft_capped(torch, values, soft_cap):
    return values if soft_cap is None else torch.tanh(values / soft_cap) * soft_cap


def full_logits(torch, scale, soft_cap):
    """All VOCAB logits, unsharded, as `LogitsProcessor.forward` makes them:
    soft cap first, then scale."""
    raw = hidden_states(torch) @ full_weight(torch).T
    return soft_capped(torch, raw, soft_cap) * scale


def scaled_then_capped_top_k(torch, scale, soft_cap):
    """The top-k of the raw logits with the scale applied before the soft cap,
    the order upstream's `get_top_k_tokens` uses."""
    raw = hidden_states(torch) @ full_weight(torch).T
    values, _ = torch.topk(raw, K, dim=-1)
    return soft_capped(torch, values * scale, soft_cap)


def install_fake_flashinfer(calls: list) -> None:
    import vllm.model_executor.layers.logits_processor as lp

    fake = types.ModuleType("flashinfer")

    def top_k(scores, k, **kwargs):
        calls.append("flashinfer.top_k")
        raise AssertionError("FlashInfer top-k called on CPU")

    fake.top_k = top_k
    sys.modules["flashinfer"] = fake
    if hasattr(lp, "has_flashinfer"):
        lp.has_flashinfer = lambda: True
    if hasattr(lp, "_flashinfer_topk"):
        lp._flashinfer_topk.cache_clear()


def build_head(torch, world_size):
    return probes.build_lm_head(torch)

def main(world_size: int, rank: int, init_file: str) -> None:
    import torch

    from vllm.config import VllmConfig
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    calls: list = []
    install_fake_flashinfer(calls)
    topk_calls = []
    real_topk = torch.topk

    def counting_topk(*args, **kwargs):
        topk_calls.append(1)
        return real_topk(*args, **kwargs)

    result = {"rank": rank, "world_size": world_size, "cases": {}}
    with distributed(VllmConfig(), world_size, rank, init_file):
        head = build_head(torch, world_size)
        result["num_org_vocab_padding"] = head.shard_indices.num_org_vocab_padding
        result["shard_rows"] = int(head.weight.shape[0])
        for scale, soft_cap in CASES:
            processor = LogitsProcessor(VOCAB, scale=scale, soft_cap=soft_cap)
            topk_calls.clear()
            torch.topk = counting_topk
            try:
                outcome = attempt(
                    lambda: processor.get_top_k_tokens(head, hidden_states(torch), K)
                )
            finally:
                torch.topk = real_topk
            name = f"scale={scale},soft_cap={soft_cap}"
            if not outcome["ok"]:
                result["cases"][name] = outcome
                continue
            ids, values = outcome["value"]
            want_values, want_ids = torch.topk(full_logits(torch, scale, soft_cap), K)
            values = values.float()
            case = {
                "ok": True,
                "ids_equal": bool(torch.equal(ids.cpu().to(torch.int64), want_ids)),
                "value_error_vs_full_logits": float((values - want_values).abs().max()),
                "value_error_vs_scaled_then_capped": float(
                    (values - scaled_then_capped_top_k(torch, scale, soft_cap)).abs().max()
                ),
                "ids_dtype": str(ids.dtype),
                "values_dtype": str(values.dtype),
                "shape": list(ids.shape),
                "torch_topk_calls": len(topk_calls),
            }
            if world_size == 1:
                # The reference is vLLM's own full-logits path, not a guess.
                forward = processor(head, hidden_states(torch))
                case["reference_error_vs_forward"] = float(
                    (forward - full_logits(torch, scale, soft_cap)).abs().max()
                )
            result["cases"][name] = case
    result["flashinfer_calls"] = calls
    emit(result)


if __name__ == "__main__":
    world_size, rank, init_file = json.loads(sys.argv[1])
    main(world_size, rank, init_file)
