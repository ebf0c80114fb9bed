"""What the per-step seed changes in probabilistic DFlash2 drafting with
block verification, observed through 0.27.1's kernels (Triton's
interpreter) in one interpreter.

Run by tests/runtime/test_runtime_step_seed.py in 0.27.1 patched by `apply`
and by `apply --only-pr`; argv[1] is a JSON object naming the checks and
their parameters. A check's `unmix` names the draws to put back on the
request's seed in a patched tree before any kernel runs ("uniform": block
verification's acceptance uniform; "walk": the DFlash2 walk's noise), so
that the tree with every other fix shows what the per-step seed alone
changes.
"""

from __future__ import annotations

import json
import sys

from closure_probe import _walk
from runtime_guest import attempt, emit, use_triton_interpreter


def _unmix(draws) -> list[str]:
    """Put the named draws back on the request's seed (where the tree mixes
    the step in at all); returns those it changed."""
    from vllm.triton_utils import tl, triton
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator

    # Triton's interpreter runs a jitted function only where its module
    # namespace holds triton.language.
    globals()["tl"] = tl

    @triton.jit
    def request_seed(seed, step):
        return seed

    changed = []
    if "uniform" in draws and hasattr(rejection_sampler_utils, "spec_step_seed"):
        rejection_sampler_utils.spec_step_seed = request_seed
        changed.append("uniform")
    if "walk" in draws and hasattr(speculator, "_step_seed"):
        speculator._step_seed = request_seed
        changed.append("walk")
    return changed


def redrafted_walk(rows=128, top_k=8, seed=6, unmix=()):
    """A position drafted at step 1 of one block and at step 0 of the next,
    over the same candidates and scores: how often the walk draws the same
    token both times."""
    import torch

    changed = _unmix(unmix)
    g = torch.Generator().manual_seed(seed)
    candidates = torch.stack([torch.randperm(64, generator=g)[:top_k] for _ in range(rows)])
    step_scores = torch.randn(rows, 1, 1, top_k, generator=g) * 2.0
    # Every edge row the same, so the draw at a step does not depend on the
    # candidate chosen before it.
    scores = step_scores.expand(rows, 2, top_k, top_k).contiguous()
    seeds = torch.randint(0, 2**62, (rows,), generator=g)
    temperature = (torch.rand(rows, generator=g) + 0.5).float()
    start = torch.randint(2, 100_000, (rows,), generator=g)
    slots = torch.arange(rows, dtype=torch.int32)
    block = candidates[:, None].expand(rows, 2, top_k).contiguous()
    # First block: the position `start` is drafted at step 1.
    first, _ = _walk(torch, scores, block, torch.stack([start - 1, start], 1).reshape(-1),
                     slots, temperature, seeds, top_k)
    # Next block, after one token accepted: `start` is drafted at step 0.
    again, _ = _walk(torch, scores, block, torch.stack([start, start + 1], 1).reshape(-1),
                     slots, temperature, seeds, top_k)
    return {
        "unmixed": changed,
        "same_token": float((first[:, 1] == again[:, 0]).double().mean()),
    }


def block_chi_square(target, draft, trials, k=2, seed=0, unmix=()):
    """Two engine steps of probabilistic DFlash2 drafting, each verified by
    0.27.1's `rejection_sample` with block verification: per trial one
    request, every vocabulary token a candidate, the draft's logits as the
    walk's scores and the target's at every position (i.i.d. tokens), the
    draft-logit cache written as the speculator writes it. The next step
    starts after the tokens the first kept, so after a truncated block it
    drafts and verifies positions the first already decided. The first two
    tokens kept must follow softmax(target) independently: Pearson's
    statistic against the product."""
    import time

    import torch

    from vllm.triton_utils import triton
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as dflash2
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    changed = _unmix(unmix)
    started = time.monotonic()
    target = torch.tensor(target)
    draft = torch.tensor(draft)
    vocab, n = target.numel(), trials
    slots = torch.arange(n, dtype=torch.int32)
    seeds = torch.arange(n, dtype=torch.int64) * 7919 + seed
    temperature = torch.ones(n)
    candidates = torch.arange(vocab).expand(n, k, vocab).contiguous()
    scores = draft.view(1, 1, 1, vocab).expand(n, k, vocab, vocab).contiguous()
    draft_logits = torch.full((n, k, vocab), float("-inf"))
    cached_ids = torch.zeros(n, k, vocab, dtype=torch.int64)
    # The position of each request's last token: its draft block's anchor.
    anchor = torch.full((n,), 1000, dtype=torch.int64)
    kept: list[list[int]] = [[] for _ in range(n)]
    truncated = 0
    for _ in range(2):
        sample_pos = (anchor[:, None] + 1 + torch.arange(k)).reshape(-1)
        tokens, realized = _walk(torch, scores, candidates, sample_pos, slots, temperature,
                                 seeds, vocab)
        dflash2._cache_draft_logits_kernel[(n * k,)](
            draft_logits, cached_ids, candidates.view(n * k, vocab),
            realized.view(n * k, vocab), slots.repeat_interleave(k),
            draft_logits.stride(0), draft_logits.stride(1),
            num_steps=k, top_k=vocab, BLOCK_K=triton.next_power_of_2(vocab), num_warps=1,
        )
        draft_sampled = torch.zeros(n, k + 1, dtype=torch.int64)
        draft_sampled[:, 1:] = tokens
        sampled, num_sampled = rejection_sample(
            target_logits=target.expand(n * (k + 1), vocab).contiguous(),
            draft_logits=draft_logits,
            draft_sampled=draft_sampled.view(-1),
            cu_num_logits=torch.arange(n + 1, dtype=torch.int32) * (k + 1),
            pos=(anchor[:, None] + torch.arange(k + 1)).reshape(-1),
            idx_mapping=slots,
            expanded_idx_mapping=slots.repeat_interleave(k + 1),
            expanded_local_pos=torch.arange(k + 1, dtype=torch.int32).repeat(n),
            temperature=temperature,
            seed=seeds,
            num_speculative_steps=k,
            use_block_verification=True,
        )
        counts = num_sampled.tolist()
        if not kept[0]:
            truncated = sum(c < k for c in counts)
        for row, count in enumerate(counts):
            kept[row] += sampled[row, :count].tolist()
        anchor = anchor + num_sampled.to(torch.int64)
    pairs = torch.tensor([row[0] * vocab + row[1] for row in kept])
    observed = torch.bincount(pairs, minlength=vocab * vocab).double()
    p = torch.softmax(target.double(), 0)
    expected = torch.outer(p, p).reshape(-1) * n
    return {
        "unmixed": changed,
        "statistic": float(((observed - expected) ** 2 / expected).sum()),
        "dof": vocab * vocab - 1,
        # Blocks of the first step that kept fewer than k drafts (so the
        # second step drafted positions the first had decided).
        "truncated_first_blocks": truncated,
        "seconds": round(time.monotonic() - started, 1),
    }


CHECKS = {f.__name__: f for f in (redrafted_walk, block_chi_square)}


def main(request: dict) -> None:
    use_triton_interpreter()
    results = {}
    for name, (check, params) in request["checks"].items():
        results[name] = attempt(lambda c=check, p=params: CHECKS[c](**p))
        results[name].pop("traceback", None) if results[name]["ok"] else None
    emit(results)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
