"""The DFlash2 Triton kernels, ours against upstream 0.28.0's, timed at
several batch sizes on the same inputs.

    python3 scripts/gpu/kernel_speed.py [--kernels DIR] [--batches 1,32,256]
                                        [--steps 15] [--out result.json]

DIR holds gumbel.py (0.27.1 as `apply` leaves it) and upstream_speculator.py
(0.28.0's), as the bundle's main/tests/kernels does. For each batch size the
selector walk (greedy and sampled) and the draft-logit cache kernel run on
inputs made as tests/runtime/modules/gpu_kernels.py makes them (top-k 16,
151936-token vocabulary), ours and upstream's alternated round by round;
each figure is the median over rounds of triton's do_bench (launch included)
and do_bench_cudagraph (the kernel alone, one launch in a CUDA graph), which
time with CUDA events after warm-ups. Only timing: correctness is
gpu_kernels.py's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNELS = ("walk_greedy", "walk_sampled", "cache")
IMPLEMENTATIONS = ("ours", "upstream")
MODES = ("launch", "graph")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=Path,
                        default=REPO / ".cache" / "gpu-bundle" / "main" / "tests" / "kernels")
    parser.add_argument("--batches", default="1,32,256",
                        help="comma-separated numbers of requests")
    parser.add_argument("--steps", type=int, default=15,
                        help="draft positions per request (block size - 1)")
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        args.batches = [int(b) for b in args.batches.split(",") if b]
    except ValueError:
        parser.error(f"--batches: integers, comma-separated, not {args.batches!r}")
    if not args.batches or min(args.batches) < 1:
        parser.error("--batches: at least one batch size, each >= 1")
    return args


def format_table(timings: dict) -> str:
    """timings[kernel][batch][implementation][mode] in microseconds."""
    lines = [f"{'kernel':<13} {'batch':>5} {'mode':>6} {'ours us':>9} {'upstream us':>11} "
             f"{'ours/up':>7}"]
    for kernel, by_batch in timings.items():
        for batch, figures in sorted(by_batch.items(), key=lambda item: int(item[0])):
            for mode in MODES:
                ours, theirs = figures["ours"][mode], figures["upstream"][mode]
                lines.append(f"{kernel:<13} {batch:>5} {mode:>6} {ours:>9.2f} {theirs:>11.2f} "
                             f"{ours / theirs:>7.3f}")
    return "\n".join(lines)


def measure(args) -> dict:
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    sys.path.insert(0, str(REPO / "tests" / "runtime" / "modules"))
    import gpu_kernels

    device = torch.device("cuda")
    _, ours, upstream = gpu_kernels.kernel_modules(
        args.kernels / "gumbel.py", args.kernels / "upstream_speculator.py")
    modules = {"ours": ours, "upstream": upstream}
    neg_inf = float("-inf")
    samples: dict = {}
    for batch in args.batches:
        max_reqs = batch + 16
        inputs = gpu_kernels.make_batch(batch, args.steps, args.top_k, args.vocab, 0,
                                        max_reqs, device)
        g = torch.Generator(device="cpu").manual_seed(1)
        temps = (torch.rand(max_reqs, generator=g) * 1.5 + 0.25).to(device)
        seeds = torch.randint(0, 2**62, (max_reqs,), generator=g).to(device)
        for _ in range(args.rounds):
            for name in IMPLEMENTATIONS:
                module = modules[name]
                tokens = torch.empty(batch, args.steps, dtype=torch.int64, device=device)
                realized = torch.empty(batch, args.steps, args.top_k, device=device)
                logits = torch.full((max_reqs, args.steps, args.vocab), neg_inf, device=device)
                ids = torch.zeros(max_reqs, args.steps, args.top_k, dtype=torch.int64,
                                  device=device)
                # The sampled walk first, so that the cache reads its scores.
                runs = {
                    "walk_sampled": lambda m=module, t=tokens, r=realized: gpu_kernels.walk(
                        m, inputs, temps, seeds, t, r, True),
                    "walk_greedy": lambda m=module, t=tokens, r=realized: gpu_kernels.walk(
                        m, inputs, temps, seeds, t, r, False),
                    "cache": lambda m=module, r=realized, lg=logits, i=ids: gpu_kernels.cache(
                        m, inputs, r, lg, i),
                }
                for kernel, fn in runs.items():
                    fn()
                    torch.cuda.synchronize()
                    entry = samples.setdefault(kernel, {}).setdefault(str(batch), {}).setdefault(
                        name, {"launch": [], "graph": []})
                    entry["launch"].append(do_bench(fn, warmup=50, rep=200) * 1e3)
                    entry["graph"].append(do_bench_cudagraph(fn, rep=200) * 1e3)
                del logits
    timings = {kernel: {batch: {name: {mode: statistics.median(v) for mode, v in modes.items()}
                                for name, modes in by_name.items()}
                        for batch, by_name in by_batch.items()}
               for kernel, by_batch in samples.items()}
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "size": {"steps": args.steps, "top_k": args.top_k, "vocab": args.vocab,
                     "rounds": args.rounds},
            "timings_us": {k: timings[k] for k in KERNELS if k in timings},
            "samples_us": samples}


def main(argv=None) -> int:
    args = parse_args(argv)
    for name in ("gumbel.py", "upstream_speculator.py"):
        if not (args.kernels / name).is_file():
            raise SystemExit(f"{args.kernels / name} is missing (the bundle's "
                             "main/tests/kernels, or tests/runtime/modules/_gpu_bundle.py DIR)")
    result = measure(args)
    print(format_table(result["timings_us"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
