"""The DFlash2 walk and cache kernels on a CUDA GPU, at a serving size.

Compiles ours (modules/dflash2/speculator.py) and upstream 0.28.0's kernels,
checks ours against plain-torch references and 0.27.1's own Gumbel sampler,
and times both. Needs torch with CUDA and triton; not vLLM: the two kernel
modules are imported from a minimal package holding only what they import
(the patched 0.27.1 gumbel.py and stand-ins for the speculator base class).

    python gpu_kernels.py --gumbel PATCHED_0271_GUMBEL_PY \
        --upstream-speculator UPSTREAM_0280_SPECULATOR_PY --out result.json

Exit status 0 when every check passes; the JSON holds checks and timings.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
OURS = REPO / "modules" / "dflash2" / "speculator.py"
NEG_INF = float("-inf")

_STUBS = {
    "vllm/__init__.py": "",
    "vllm/triton_utils.py": (
        "import triton\nimport triton.language as tl\n"
        "import triton.language.extra.libdevice as tldevice\nHAS_TRITON = True\n"
    ),
    "vllm/logger.py": (
        "import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n"
    ),
    "vllm/config/__init__.py": "class VllmConfig:\n    pass\n",
    "vllm/config/compilation.py": (
        "import enum\n\n\nclass CUDAGraphMode(enum.Enum):\n"
        "    NONE = 0\n    PIECEWISE = 1\n    FULL = 2\n"
    ),
    "vllm/v1/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/gpu/__init__.py": "",
    "vllm/v1/worker/gpu/sample/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/dflash/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py": "class DFlashSpeculator:\n    pass\n",
    "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py": "",
}


def kernel_modules(gumbel: Path, upstream: Path, ours: Path = OURS):
    """Import (gumbel, ours, upstream) from a minimal `vllm` package."""
    root = Path(tempfile.mkdtemp(prefix="dflash2-kernels-"))
    for relative, text in _STUBS.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    spec_dir = root / "vllm/v1/worker/gpu/spec_decode/dflash2"
    shutil.copyfile(gumbel, root / "vllm/v1/worker/gpu/sample/gumbel.py")
    shutil.copyfile(ours, spec_dir / "speculator.py")
    shutil.copyfile(upstream, spec_dir / "upstream_speculator.py")
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    base = "vllm.v1.worker.gpu"
    return (
        importlib.import_module(f"{base}.sample.gumbel"),
        importlib.import_module(f"{base}.spec_decode.dflash2.speculator"),
        importlib.import_module(f"{base}.spec_decode.dflash2.upstream_speculator"),
    )


def make_batch(num_reqs, num_steps, top_k, vocab, seed, max_num_reqs, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    scores = torch.randn(num_reqs, num_steps, top_k, top_k, generator=g) * 2.0
    # Distinct candidates per row, drawn without a per-row randperm.
    offsets = torch.randint(0, vocab - top_k * 64, (num_reqs * num_steps, 1), generator=g)
    candidates = offsets + torch.argsort(torch.rand(num_reqs * num_steps, top_k * 64,
                                                    generator=g), dim=1)[:, :top_k]
    slots = torch.randperm(max_num_reqs, generator=g)[:num_reqs].to(torch.int32)
    positions = torch.randint(8, 4000, (num_reqs,), generator=g)
    return {
        "scores": scores.to(device),
        "candidates": candidates.view(num_reqs, num_steps, top_k).to(device),
        "req_state": slots.repeat_interleave(num_steps).to(device),
        "sample_pos": (positions[:, None] + 1 + torch.arange(num_steps)).reshape(-1).to(device),
        "slots": slots.to(device),
    }


def walk(module, batch, temperature, seeds, tokens, realized, probabilistic, fp64=False):
    import triton

    num_reqs, num_steps, top_k = batch["candidates"].shape
    module._selector_walk_kernel[(num_reqs,)](
        batch["scores"], batch["candidates"], batch["sample_pos"], batch["req_state"],
        temperature, seeds, tokens, realized,
        num_steps=num_steps, top_k=top_k, BLOCK_K=triton.next_power_of_2(top_k),
        SAMPLE_PROBABILISTIC=probabilistic, USE_FP64=fp64, num_warps=1,
    )


def cache(module, batch, realized, draft_logits, cached_ids):
    import triton

    num_reqs, num_steps, top_k = batch["candidates"].shape
    module._cache_draft_logits_kernel[(num_reqs * num_steps,)](
        draft_logits, cached_ids, batch["candidates"], realized, batch["req_state"],
        draft_logits.stride(0), draft_logits.stride(1),
        num_steps=num_steps, top_k=top_k, BLOCK_K=triton.next_power_of_2(top_k), num_warps=1,
    )


def rows_along(batch, tokens):
    """The edge row each position of `tokens` was drawn from (vectorised)."""
    scores, candidates = batch["scores"], batch["candidates"]
    num_reqs, num_steps, top_k = candidates.shape
    previous = torch.zeros(num_reqs, dtype=torch.int64, device=scores.device)
    rows = torch.empty(num_reqs, num_steps, top_k, device=scores.device)
    arange = torch.arange(num_reqs, device=scores.device)
    for s in range(num_steps):
        rows[:, s] = scores[arange, s, previous]
        previous = (candidates[:, s] == tokens[:, s, None]).int().argmax(1)
    return rows


def step_seeds(gumbel, seeds, step):
    """The seeds a draw at draft step `step` is keyed with: the request's, with
    the step in their high 32 bits where gumbel.py has `spec_step_seed` (the
    spec-step-seed fix, vLLM 0.33.0's formula)."""
    return seeds ^ (step << 32) if hasattr(gumbel, "spec_step_seed") else seeds


def upstream_walk_by_step(upstream, gumbel, batch, rows, temperature, seeds, salt):
    """Upstream 0.28.0's sampled walk one step at a time, along the edge rows
    `rows` (another walk's path), each step at the salted positions and on
    its step's seeds: 0.28.0's walk takes one seed per request for a block.
    Returns its tokens and realized rows."""
    num_reqs, num_steps, top_k = batch["candidates"].shape
    device = rows.device
    tokens = torch.empty(num_reqs, num_steps, dtype=torch.int64, device=device)
    realized = torch.empty(num_reqs, num_steps, top_k, device=device)
    positions = (batch["sample_pos"] + salt).view(num_reqs, num_steps)
    for s in range(num_steps):
        scores = torch.zeros(num_reqs, 1, top_k, top_k, device=device)
        scores[:, 0, 0] = rows[:, s]  # a first step reads edge row 0
        one_step = {
            "scores": scores,
            "candidates": batch["candidates"][:, s : s + 1].contiguous(),
            "req_state": batch["slots"],
            "sample_pos": positions[:, s].contiguous(),
        }
        step_tokens = torch.empty(num_reqs, 1, dtype=torch.int64, device=device)
        step_realized = torch.empty(num_reqs, 1, top_k, device=device)
        walk(upstream, one_step, temperature, step_seeds(gumbel, seeds, s), step_tokens,
             step_realized, probabilistic=True)
        tokens[:, s], realized[:, s] = step_tokens[:, 0], step_realized[:, 0]
    return tokens, realized


def greedy_reference(batch):
    scores, candidates = batch["scores"], batch["candidates"]
    num_reqs, num_steps, _ = candidates.shape
    previous = torch.zeros(num_reqs, dtype=torch.int64, device=scores.device)
    arange = torch.arange(num_reqs, device=scores.device)
    tokens = torch.empty(num_reqs, num_steps, dtype=torch.int64, device=scores.device)
    for s in range(num_steps):
        previous = scores[arange, s, previous].argmax(-1)
        tokens[:, s] = candidates[arange, s, previous]
    return tokens


def chi_square_p(counts, probs, min_expected=5.0):
    counts, probs = counts.double().cpu(), probs.double().cpu()
    expected = probs * counts.sum()
    keep = expected >= min_expected
    obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    if exp[-1] < min_expected:
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = obs.numel() - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                      torch.tensor(stat / 2.0, dtype=torch.float64)))
    return p, stat, dof


def run(args) -> dict:
    import triton
    from triton.testing import do_bench, do_bench_cudagraph

    device = torch.device(args.device)
    gumbel, ours, upstream = kernel_modules(Path(args.gumbel), Path(args.upstream_speculator))
    R, S, K, V = args.reqs, args.steps, args.top_k, args.vocab
    max_reqs = R + 16
    batch = make_batch(R, S, K, V, 0, max_reqs, device)
    g = torch.Generator(device="cpu").manual_seed(1)
    temps = (torch.rand(max_reqs, generator=g) * 1.5 + 0.25).to(device)
    seeds = torch.randint(0, 2**62, (max_reqs,), generator=g).to(device)
    checks, timings = {}, {}

    def buffers():
        return (torch.full((R, S), -7, dtype=torch.int64, device=device),
                torch.full((R, S, K), 12345.0, device=device))

    # Greedy: exact argmax walk.
    tokens, realized = buffers()
    walk(ours, batch, temps, seeds, tokens, realized, probabilistic=False)
    checks["greedy_walk_equals_reference"] = bool(torch.equal(tokens, greedy_reference(batch)))
    up_tokens, up_realized = buffers()
    walk(upstream, batch, temps, seeds, up_tokens, up_realized, probabilistic=False)
    checks["greedy_walk_equals_upstream"] = bool(torch.equal(tokens, up_tokens))

    # Sampled: every draw equals 0.27.1's own sampler keyed at Q-1, moved by
    # the draft's salt where gumbel.py has one (the draft-noise-salt fix), on
    # the step's seed where it has spec_step_seed (the spec-step-seed fix);
    # upstream's walk is 0.28.0's, which makes that draw at the salted
    # positions on the step's seed, walked one step at a time.
    arange = torch.arange(R, device=device)
    salt = getattr(gumbel, "_DRAFT_NOISE_SALT", 0)
    salt = int(getattr(salt, "value", salt))

    def verification_draws(tokens, fp64):
        rows = rows_along(batch, tokens)
        drawn = torch.empty_like(tokens)
        for s in range(S):
            logits = torch.full((R, V), NEG_INF, device=device)
            logits[arange[:, None], batch["candidates"][:, s]] = rows[:, s]
            q = batch["sample_pos"].view(R, S)[:, s]
            drawn[:, s] = gumbel.gumbel_sample(logits, batch["slots"], temps,
                                               step_seeds(gumbel, seeds, s), q - 1 + salt,
                                               apply_temperature=True, use_fp64=fp64)
        return drawn

    tokens64, realized64 = buffers()
    walk(ours, batch, temps, seeds, tokens64, realized64, probabilistic=True, fp64=True)
    checks["sampled_fp64_draws_equal_0271_sampler"] = bool(
        torch.equal(tokens64, verification_draws(tokens64, True)))
    tokens, realized = buffers()
    walk(ours, batch, temps, seeds, tokens, realized, probabilistic=True)
    rows = rows_along(batch, tokens)
    drawn = verification_draws(tokens, False)
    checks["sampled_draws_equal_0271_sampler_at_q_minus_1"] = bool(torch.equal(tokens, drawn))
    checks["sampled_draw_mismatches"] = int((tokens != drawn).sum())
    checks["steps_on_seeds_of_their_own"] = not torch.equal(step_seeds(gumbel, seeds, 1), seeds)
    up_tokens, up_realized = upstream_walk_by_step(upstream, gumbel, batch, rows, temps, seeds,
                                                   salt)
    checks["sampled_walk_equals_upstream_tokens"] = bool(torch.equal(tokens, up_tokens))

    # Cache: rows / T at the walked candidates, -inf elsewhere; upstream's is raw.
    draft_logits = torch.full((max_reqs, S, V), NEG_INF, device=device)
    cached_ids = torch.zeros(max_reqs, S, K, dtype=torch.int64, device=device)
    cache(ours, batch, realized, draft_logits, cached_ids)
    slot = batch["slots"].long()
    t = temps[slot][:, None, None]
    written = draft_logits[slot[:, None, None], torch.arange(S, device=device)[None, :, None],
                           batch["candidates"]]
    expected = rows / t
    checks["cache_equals_realized_bitwise"] = bool(torch.equal(written, realized))
    checks["cache_over_t_max_rel_err"] = float(((written - expected).abs()
                                                / expected.abs().clamp_min(1e-30)).max())
    checks["cache_close_to_rows_over_t"] = checks["cache_over_t_max_rel_err"] < 1e-6
    checks["cache_finite_only_at_candidates"] = int(torch.isfinite(draft_logits).sum()) == R * S * K
    up_logits = torch.full_like(draft_logits, NEG_INF)
    cache(upstream, batch, up_realized, up_logits, torch.zeros_like(cached_ids))
    up_written = up_logits[slot[:, None, None], torch.arange(S, device=device)[None, :, None],
                           batch["candidates"]]
    checks["upstream_cache_is_raw_rows"] = bool(torch.equal(up_written, rows))

    # A second step replaces the first step's columns entirely.
    second = make_batch(R, S, K, V, 2, max_reqs, device)
    second["req_state"], second["slots"] = batch["req_state"], batch["slots"]
    tokens2, realized2 = buffers()
    walk(ours, second, temps, seeds, tokens2, realized2, probabilistic=True)
    cache(ours, second, realized2, draft_logits, cached_ids)
    checks["second_step_clears_first"] = int(torch.isfinite(draft_logits).sum()) == R * S * K

    # Padding rows (-1) write nothing.
    padded = dict(batch)
    padded["req_state"] = batch["req_state"].clone()
    padded["req_state"][(R - 8) * S:] = -1
    before = draft_logits.clone()
    tokens3, realized3 = buffers()
    walk(ours, padded, temps, seeds, tokens3, realized3, probabilistic=True)
    cache(ours, padded, realized3, draft_logits, cached_ids)
    pad_slots = batch["slots"][R - 8:].long()
    checks["padding_rows_write_nothing"] = bool(
        (tokens3[R - 8:] == -7).all() and torch.equal(draft_logits[pad_slots], before[pad_slots]))

    # Slots far enough in that slot * stride passes 2**31 elements (a
    # 2048-request server with this vocabulary): the write must land there.
    if device.type == "cuda" and args.large_slots:
        big_reqs = 2048 + 8
        big = torch.full((big_reqs, S, V), NEG_INF, device=device)
        far = dict(batch)
        far_slots = torch.arange(big_reqs - R, big_reqs, dtype=torch.int32, device=device)
        far["req_state"] = far_slots.repeat_interleave(S)
        far_ids = torch.zeros(big_reqs, S, K, dtype=torch.int64, device=device)
        cache(ours, far, realized, big, far_ids)
        torch.cuda.synchronize()
        landed = big[far_slots.long()[:, None, None], torch.arange(S, device=device)[None, :, None],
                     batch["candidates"]]
        checks["large_slot_offsets_land_in_place"] = bool(
            torch.equal(landed, realized)
            and int(torch.isfinite(big).sum()) == R * S * K
            and far_slots[-1].item() * big.stride(0) > 2**31)
        del big, far_ids

    # Path law: many independent draws of one block, all seeds distinct.
    N = args.samples
    one = make_batch(1, 2, K, V, 3, 1, device)
    law_batch = {
        "scores": one["scores"].expand(N, -1, -1, -1).contiguous(),
        "candidates": one["candidates"].expand(N, -1, -1).contiguous(),
        "req_state": torch.arange(N, dtype=torch.int32, device=device).repeat_interleave(2),
        "sample_pos": one["sample_pos"].repeat(N),
    }
    T = 0.7
    law_temps = torch.full((N,), T, device=device)
    law_seeds = torch.randint(0, 2**62, (N,), generator=g).to(device)
    law_tokens = torch.empty(N, 2, dtype=torch.int64, device=device)
    law_realized = torch.empty(N, 2, K, device=device)
    walk(ours, law_batch, law_temps, law_seeds, law_tokens, law_realized, probabilistic=True)
    cand = one["candidates"][0]
    choice = torch.stack([(cand[s][None] == law_tokens[:, s, None]).int().argmax(1)
                          for s in range(2)], 1)
    counts = torch.bincount(choice[:, 0] * K + choice[:, 1], minlength=K * K)
    sc = one["scores"][0].double()

    def law(temp):
        first = torch.softmax(sc[0, 0] / temp, -1)
        return (first[:, None] * torch.softmax(sc[1] / temp, -1)).reshape(-1)

    p, stat, dof = chi_square_p(counts, law(T))
    p_wrong, _, _ = chi_square_p(counts, law(1.0))
    checks["path_law_p_value"] = p
    checks["path_law_p_value_untempered"] = p_wrong
    checks["path_law_matches_softmax_over_t"] = p > 1e-3 and p_wrong < 1e-6

    # Timings at the serving size, ours and upstream's on the same inputs, in
    # alternating rounds so that drift and warm-up fall on both alike. "graph"
    # replays a CUDA graph of one launch: the kernel without Python's launch.
    samples: dict[str, list[float]] = {}
    devices = ((("ours", ours), ("upstream", upstream)) if device.type == "cuda" else ())
    for _ in range(args.rounds if devices else 0):
        for name, module in devices:
            tk, rz = buffers()
            dl = torch.full((max_reqs, S, V), NEG_INF, device=device)
            ids = torch.zeros(max_reqs, S, K, dtype=torch.int64, device=device)
            benches = {
                "walk_greedy": lambda m=module: walk(m, batch, temps, seeds, tk, rz, False),
                "walk_sampled": lambda m=module: walk(m, batch, temps, seeds, tk, rz, True),
                "cache": lambda m=module: cache(m, batch, rz, dl, ids),
            }
            for label, fn in benches.items():
                fn()
                samples.setdefault(f"{name}_{label}_us", []).append(
                    do_bench(fn, warmup=50, rep=200) * 1e3)
                samples.setdefault(f"{name}_{label}_graph_us", []).append(
                    do_bench_cudagraph(fn, rep=200) * 1e3)
    timings = {key: statistics.median(values) for key, values in samples.items()}

    return {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "size": {"reqs": R, "steps": S, "top_k": K, "vocab": V, "samples": N},
        "checks": checks,
        "timings_us": {k: round(v, 2) for k, v in timings.items()},
    }


REQUIRED = (
    "greedy_walk_equals_reference",
    "greedy_walk_equals_upstream",
    "sampled_draws_equal_0271_sampler_at_q_minus_1",
    "sampled_fp64_draws_equal_0271_sampler",
    "sampled_walk_equals_upstream_tokens",
    "cache_equals_realized_bitwise",
    "cache_close_to_rows_over_t",
    "cache_finite_only_at_candidates",
    "upstream_cache_is_raw_rows",
    "second_step_clears_first",
    "padding_rows_write_nothing",
    "path_law_matches_softmax_over_t",
)


# Checks that only a CUDA device runs, each judged where it ran.
WHERE_RUN = ("large_slot_offsets_land_in_place",)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gumbel", required=True)
    parser.add_argument("--upstream-speculator", required=True)
    parser.add_argument("--reqs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--samples", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-large-slots", dest="large_slots", action="store_false",
                        help="skip the check that allocates a 9 GB cache")
    parser.add_argument("--device", default="cuda",
                        help="cpu: the checks in Triton's interpreter "
                             "(TRITON_INTERPRET=1), untimed")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args)
    result["seconds"] = round(time.monotonic() - started, 1)
    checks = result["checks"]
    result["failed"] = [name for name in REQUIRED if not checks.get(name)] + [
        name for name in WHERE_RUN if name in checks and not checks[name]
    ]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
