"""Where a host-bound step's slow spells come from: the GPU or the host.

    python3 scripts/gpu/spells.py [--seconds S] [--out FILE]
    python3 scripts/gpu/spells.py --cores [--seconds S] [--out FILE]

A DFlash2 engine step at one request is GPU work (reading the target's
weights) followed by host work (Python) that waits for it; its repetitions
move in spells that outlast a request. This runs the two halves of such a
step without vLLM, in three phases of S/3 seconds each:
  `step`     the GPU part (a weight read of Qwen3-8B's size), then the host
             part (a busy loop of a fixed count of Python operations), then
             a synchronisation, as an engine step does;
  `gpu`      the GPU part alone, back to back;
  `host`     the host part alone.
Per phase it prints the spread of the iteration times and of their means
over quarter-second windows, and how much the windows of each half correlate
with each other: a spell of the GPU shows in `gpu` and in `step`'s GPU time,
one of the host in `host` and in `step`'s host time. It also reads the time
the hypervisor stole, and the GPU's SM clock where NVML answers.

`--cores` (no GPU) asks the host alone whether its spells are each core's
own or the machine's, and how far its cores differ in speed: two engines
that take turns on different cores share no spell of either.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_engine import stolen_seconds  # noqa: E402

WINDOW_S = 0.25
# Python operations in one host part: about what a DFlash2 step's host time
# is at one request (3 to 4 ms) on the H200's host.
HOST_OPS = 40000
LAYERS, HIDDEN, WIDTH = 36, 4096, 53248  # 36 x 4096 x 53248 bf16: 15.7 GB, an 8B model


def spread(times: list[float], stamps: list[float], window_s: float = WINDOW_S) -> dict:
    """The iterations' spread (standard deviation over mean) and that of
    their means over windows of `window_s`, and the windows' lag-1
    correlation: near 0 for independent noise, towards 1 for spells that
    outlast a window."""
    times = np.asarray(times, float)
    means = _window_means(times, stamps, window_s)
    lag1 = _correlation(means[:-1], means[1:])
    return {"median_ms": float(np.median(times)) * 1e3,
            "spread": float(times.std() / times.mean()),
            "window_spread": float(means.std() / means.mean()),
            "window_lag1": lag1, "iterations": int(times.size), "windows": int(means.size)}


def _window_means(values, stamps, window_s: float = WINDOW_S) -> np.ndarray:
    """The mean of `values` over each window of `window_s` from the first stamp."""
    values, stamps = np.asarray(values, float), np.asarray(stamps, float)
    bins = ((stamps - stamps[0]) // window_s).astype(int)
    return np.array([values[bins == b].mean() for b in np.unique(bins)])


def _correlation(a, b) -> float:
    """Pearson's r; nan where either side is constant or too short."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def host_part() -> None:
    total = 0
    for i in range(HOST_OPS):
        total += i & 7


def sm_clock():
    """A reader of the GPU's SM clock in MHz, or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - the clock is a side figure
        return None


def run_phase(name: str, seconds: float, gpu_part, clock) -> dict:
    import torch

    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
        enable_timing=True)
    figures = {"total": [], "gpu": [], "host": []}
    stamps, clocks = [], []
    stolen = stolen_seconds()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        if name != "host":
            start_event.record()
            gpu_part()
            end_event.record()
        h = time.perf_counter()
        if name != "gpu":
            host_part()
        host = time.perf_counter() - h
        if name != "host":
            end_event.synchronize()
            figures["gpu"].append(start_event.elapsed_time(end_event) / 1e3)
        figures["host"].append(host)
        figures["total"].append(time.perf_counter() - t)
        stamps.append(t)
        if clock and len(stamps) % 25 == 0:
            clocks.append(clock())
    found = {part: spread(values, stamps) for part, values in figures.items() if values}
    if name == "step":
        found["gpu_host_window_correlation"] = _correlation(
            _window_means(figures["gpu"], stamps), _window_means(figures["host"], stamps))
    found["stolen_s"] = round(stolen_seconds() - stolen, 3)
    if clocks:
        found["sm_clock_mhz"] = {"min": min(clocks), "median": float(np.median(clocks)),
                                 "max": max(clocks)}
    return found


def timed_on(cpu: int) -> float:
    os.sched_setaffinity(0, {cpu})
    t = time.perf_counter()
    host_part()
    return time.perf_counter() - t


def run_cores(seconds: float, cpus: list[int]) -> dict:
    """Whether the host's spells belong to a core or to the machine, and
    whether its cores differ in speed. The host part runs on two cores in
    turn, a b a b ..., each run pinned, so that every run follows a
    migration: when two runs on different cores, next to each other in
    time, differ more than two runs on one core a run apart, the spells are
    the cores' own, and two processes on two cores do not share them. Then
    every core in turn, for its own median."""
    if len(cpus) < 2:
        raise SystemExit(f"--cores needs two cores or more; this process has {cpus}")
    a, b = cpus[len(cpus) // 4], cpus[3 * len(cpus) // 4]
    original = os.sched_getaffinity(0)
    try:
        on_a, on_b = [], []
        end = time.perf_counter() + seconds / 2
        while time.perf_counter() < end:
            on_a.append(timed_on(a))
            on_b.append(timed_on(b))
        per_core: dict[int, list[float]] = {c: [] for c in cpus}
        end = time.perf_counter() + seconds / 2
        while time.perf_counter() < end:
            for c in cpus:
                per_core[c].extend(timed_on(c) for _ in range(3))
    finally:
        os.sched_setaffinity(0, original)
    log_a, log_b = np.log(on_a), np.log(on_b)
    across = log_b - log_a
    medians = {c: float(np.median(v)) * 1e3 for c, v in per_core.items() if v}
    overall = float(np.median(list(medians.values())))
    return {"cores": [a, b], "pairs": len(on_a),
            # standard deviations of log ratios: of one core's neighbours,
            # and of the two cores' (less their lasting difference)
            "same_core_sd": float(np.std(np.diff(log_a))),
            "across_cores_sd": float(np.std(across - np.median(across))),
            "b_over_a": float(np.exp(np.median(across))),
            "per_core_ms": {str(c): round(m, 4) for c, m in medians.items()},
            "per_core_spread": float(np.std(list(medians.values())) / overall)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cores", action="store_true",
                        help="only the host's cores: whose spells they are")
    args = parser.parse_args(argv)
    if args.cores:
        found = run_cores(args.seconds, sorted(os.sched_getaffinity(0)))
        print("cores", json.dumps(found), flush=True)
        if args.out:
            args.out.write_text(json.dumps(found, indent=1))
        return 0
    import torch

    weights = [torch.randn(HIDDEN, WIDTH // 8, device="cuda", dtype=torch.bfloat16)
               .repeat(1, 8) for _ in range(LAYERS)]
    x = torch.randn(16, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def gpu_part():
        for w in weights:
            x @ w

    for _ in range(20):
        gpu_part()
    torch.cuda.synchronize()
    clock = sm_clock()
    found = {"host": {"cpus": len(os.sched_getaffinity(0))}}
    for name in ("step", "gpu", "host"):
        found[name] = run_phase(name, args.seconds / 3, gpu_part, clock)
        print(name, json.dumps(found[name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
