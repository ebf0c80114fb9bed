"""The per-step seed on a CUDA GPU: two engine steps of probabilistic DFlash2
drafting verified by 0.27.1's `rejection_sample` with block verification,
compiled (not interpreted), many requests at once.

    python gpu_step_seed.py --gumbel PATCHED_GUMBEL_PY \
        --rejection-sampler PATCHED_REJECTION_SAMPLER_UTILS_PY \
        --trials 200000 [--unmix] [--standard] --out result.json

Needs torch with CUDA and triton, not vLLM: the kernels are imported from a
minimal package (gpu_kernels.py's, plus the rejection sampler), the files
as this project's `apply` leaves 0.27.1's. `--unmix` puts both draws back on
the request's seed before anything compiles (run it in a process of its
own); `--standard` verifies with standard verification instead. The same
request and statistic as venv_side/step_seed_probe.py's block_chi_square.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gpu_kernels  # noqa: E402

from tests.block_verification_model import DRAFT_LOGITS, TARGET_LOGITS  # noqa: E402


def modules(gumbel: Path, sampler: Path):
    """(gumbel, our speculator, 0.27.1's patched rejection sampler)."""
    gumbel_module, ours, _ = gpu_kernels.kernel_modules(gumbel, gumbel)
    root = Path(gumbel_module.__file__).parents[1]
    shutil.copyfile(sampler, root / "spec_decode" / "rejection_sampler_utils.py")
    return gumbel_module, ours, importlib.import_module(
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
    )


def unmix(sampler, ours) -> None:
    import triton

    @triton.jit
    def request_seed(seed, step):
        return seed

    sampler.spec_step_seed = request_seed
    ours._step_seed = request_seed


def chi_square(ours, sampler, trials, k=2, block=True, device="cuda"):
    import triton

    target = torch.tensor(TARGET_LOGITS, device=device)
    draft = torch.tensor(DRAFT_LOGITS, device=device)
    vocab, n = target.numel(), trials
    slots = torch.arange(n, dtype=torch.int32, device=device)
    seeds = torch.arange(n, dtype=torch.int64, device=device) * 7919
    temperature = torch.ones(n, device=device)
    candidates = torch.arange(vocab, device=device).expand(n, k, vocab).contiguous()
    scores = draft.view(1, 1, 1, vocab).expand(n, k, vocab, vocab).contiguous()
    draft_logits = torch.full((n, k, vocab), float("-inf"), device=device)
    cached_ids = torch.zeros(n, k, vocab, dtype=torch.int64, device=device)
    anchor = torch.full((n,), 1000, dtype=torch.int64, device=device)
    kept = torch.full((n, 2 * (k + 1)), -1, dtype=torch.int64, device=device)
    length = torch.zeros(n, dtype=torch.int64, device=device)
    rows = torch.arange(n, device=device)
    for _ in range(2):
        batch = {
            "scores": scores, "candidates": candidates,
            "sample_pos": (anchor[:, None] + 1 + torch.arange(k, device=device)).reshape(-1),
            "req_state": slots.repeat_interleave(k),
        }
        tokens = torch.empty(n, k, dtype=torch.int64, device=device)
        realized = torch.empty(n, k, vocab, device=device)
        gpu_kernels.walk(ours, batch, temperature, seeds, tokens, realized, probabilistic=True)
        ours._cache_draft_logits_kernel[(n * k,)](
            draft_logits, cached_ids, candidates.view(n * k, vocab), realized.view(n * k, vocab),
            batch["req_state"], draft_logits.stride(0), draft_logits.stride(1),
            num_steps=k, top_k=vocab, BLOCK_K=triton.next_power_of_2(vocab), num_warps=1,
        )
        draft_sampled = torch.zeros(n, k + 1, dtype=torch.int64, device=device)
        draft_sampled[:, 1:] = tokens
        sampled, num_sampled = sampler.rejection_sample(
            target_logits=target.expand(n * (k + 1), vocab).contiguous(),
            draft_logits=draft_logits,
            draft_sampled=draft_sampled.view(-1),
            cu_num_logits=torch.arange(n + 1, dtype=torch.int32, device=device) * (k + 1),
            pos=(anchor[:, None] + torch.arange(k + 1, device=device)).reshape(-1),
            idx_mapping=slots,
            expanded_idx_mapping=slots.repeat_interleave(k + 1),
            expanded_local_pos=torch.arange(k + 1, dtype=torch.int32, device=device).repeat(n),
            temperature=temperature,
            seed=seeds,
            num_speculative_steps=k,
            use_block_verification=block,
        )
        count = num_sampled.to(torch.int64)
        for i in range(k + 1):
            take = i < count
            kept[rows[take], length[take] + i] = sampled[take, i]
        length += count
        anchor = anchor + count
    pairs = kept[:, 0] * vocab + kept[:, 1]
    observed = torch.bincount(pairs, minlength=vocab * vocab).double()
    p = torch.softmax(target.double(), 0)
    expected = torch.outer(p, p).reshape(-1) * n
    return {
        "statistic": float(((observed - expected) ** 2 / expected).sum()),
        "dof": vocab * vocab - 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gumbel", type=Path, required=True)
    parser.add_argument("--rejection-sampler", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=200_000)
    parser.add_argument("--unmix", action="store_true")
    parser.add_argument("--standard", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    _, ours, sampler = modules(args.gumbel, args.rejection_sampler)
    if args.unmix:
        unmix(sampler, ours)
    started = time.monotonic()
    result = chi_square(ours, sampler, args.trials, block=not args.standard)
    result.update(trials=args.trials, unmixed=args.unmix, block=not args.standard,
                  seconds=round(time.monotonic() - started, 1),
                  device=torch.cuda.get_device_name())
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
