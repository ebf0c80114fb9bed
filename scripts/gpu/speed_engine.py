"""One engine of a speed run, in its own process: it starts vLLM, warms
up, times its cells (alone, or paired: one cell at a time as the run asks),
records the host's share of each cycle, and profiles on request."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from speed_plan import (
    C1_REQUESTS,
    ENGINES,
    EXIT_MARGIN,
    HOST_PROFILE_REQUESTS,
    HOST_PROFILE_ROWS,
    HOST_PROFILE_S,
    LOADS,
    OUTPUT_TOKENS,
    POSITIONS,
    PRIME_TOKENS,
    VERSIONS,
    engine_kwargs,
)


def host_usage() -> dict:
    """What the process has taken of the host so far: CPU seconds of all its
    threads, context switches, and the garbage collector's runs."""
    import gc
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "involuntary": usage.ru_nivcsw,
            "voluntary": usage.ru_nvcsw,
            "gc": sum(stats["collections"] for stats in gc.get_stats()),
            "steal_s": stolen_seconds()}


def threads_on(cores: set[int]) -> list[int]:
    """How many of this process's threads may run on `cores` alone, and
    how many it has."""
    tasks = os.listdir("/proc/self/task")
    alone = 0
    for task in tasks:
        try:
            alone += os.sched_getaffinity(int(task)) == cores
        except OSError:  # the thread has ended
            pass
    return [alone, len(tasks)]


def stolen_seconds(stat: str = "/proc/stat") -> float:
    """CPU time the hypervisor gave to others while this machine's cores
    wanted it, summed over the cores since boot (0 where not counted)."""
    try:
        fields = Path(stat).read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0
    # cpu user nice system idle iowait irq softirq steal ...
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def usage_delta(after: dict, before: dict) -> dict:
    return {key: round(after[key] - before[key], 4) for key in after}


def run_engine(args) -> None:
    started = time.time()
    models = json.loads(Path(args.models).read_text())
    # The newest upstream's version is the run's to say (its tree's METADATA).
    version = args.vllm_version or VERSIONS[ENGINES[args.name][0]]
    result = {"engine": args.name, "round": args.round, "version": version,
              "attention_backend": args.attention_backend,
              "flashinfer_sampler_env": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER"),
              "flashinfer_workspace": os.environ.get("FLASHINFER_WORKSPACE_BASE"),
              "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
              "cells": {}, "timings": {}, "errors": {}}
    result_path = Path(args.result)

    def save():
        # Whole or not at all: the run copies the results out while engines
        # run, and a run cut short keeps the last copy.
        staged = result_path.with_name(result_path.name + ".partial")
        staged.write_text(json.dumps(result))
        os.replace(staged, result_path)

    import vllm
    from vllm import LLM, SamplingParams

    from dflash2_backport.verification.gpu_probes import counter_delta, spec_counters

    result["vllm_file"] = vllm.__file__
    result["vllm_version"] = getattr(vllm, "__version__", None)
    result["timings"]["import_s"] = round(time.time() - started, 1)
    t = time.time()
    llm = LLM(**engine_kwargs(args.name, models, args.attention_backend))
    result["timings"]["startup_s"] = round(time.time() - t, 1)
    save()
    prompts = json.loads(Path(models["prompts"]).read_text())
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True,
                            detokenize=False)

    def generate(batch):
        outputs = llm.generate([{"prompt_token_ids": p} for p in batch], params,
                               use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def repetition(cell):
        """(output tokens/s, per-request tokens/s, spec counters, first output)."""
        regime, load = cell.split("_")
        before = spec_counters(llm)
        if LOADS[load] == 1:
            per_request, tokens, elapsed = [], 0, 0.0
            for prompt in prompts[regime][:C1_REQUESTS]:
                t = time.perf_counter()
                out = generate([prompt])
                took = time.perf_counter() - t
                per_request.append(len(out[0]) / took)
                tokens, elapsed = tokens + len(out[0]), elapsed + took
        else:
            t = time.perf_counter()
            out = generate(prompts[regime][:LOADS[load]])
            elapsed = time.perf_counter() - t
            tokens, per_request = sum(map(len, out)), []
        return tokens / elapsed, per_request, counter_delta(spec_counters(llm), before), out

    # A round may time only some cells (those whose intervals are still
    # wide); it warms up on those alone, so that more repetitions fit.
    cells = args.cells

    def unrecorded_cycle():
        for cell in cells:
            repetition(cell)

    primer = SamplingParams(temperature=0.0, max_tokens=PRIME_TOKENS, ignore_eos=True,
                            detokenize=False)

    def prime(cell):
        """A short request of the cell's regime, not timed: an engine that
        sat idle while its partner ran meets its cell as warm as the
        partner, which ran just before."""
        llm.generate([{"prompt_token_ids": prompts[cell.split("_")[0]][0]}], primer,
                     use_tqdm=False)

    t = time.time()
    for _ in range(args.warmups):
        unrecorded_cycle()
    result["timings"]["warmup_s"] = round(time.time() - t, 1)
    # What the host gave the step once vLLM had set itself up: the cores the
    # process may use and torch's CPU threads (0.28.0 drops to one after
    # its warm-up unless OMP_NUM_THREADS is set; 0.27.1 keeps the default).
    import torch

    # The card and torch build the figures were measured on, for the run's
    # summary.md: a figure means nothing without them.
    result["gpu"] = torch.cuda.get_device_name()
    result["torch"] = torch.__version__
    result["host"] = {"cpus": len(os.sched_getaffinity(0)),
                      "torch_threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if args.main_cpu is not None:
        # A thread starts on its maker's cores, and torch makes its CPU
        # threads at its first parallel operation: made now, they keep
        # every core, as they would unpinned.
        torch.ones(1 << 20).add_(1)
        # Then this thread alone (pid 0 is the calling thread): it
        # schedules, drafts and launches.
        os.sched_setaffinity(0, {args.main_cpu})
        result["host"]["main_cpu"] = sorted(os.sched_getaffinity(0))
        result["host"]["threads_on_main_cpu"] = threads_on({args.main_cpu})

    def measure_cell(cell, position=None):
        """One repetition of `cell`, recorded; its time and host usage.
        Paired, `position` says whether this engine ran it first or second."""
        cell_start, host_before = time.time(), host_usage()
        rate, per_request, counters, out = repetition(cell)
        entry = result["cells"].setdefault(cell, {"reps": [], "per_request": [],
                                                  "counters": []})
        if position is not None:
            entry.setdefault("order", []).append(position)
        entry["reps"].append(rate)
        entry["per_request"].append(per_request)
        entry["counters"].append(counters)
        entry["first_output"] = out[0][:32]
        entry["output_tokens"] = sum(map(len, out))
        return {"wall_s": time.time() - cell_start, **usage_delta(host_usage(), host_before)}

    def add_cycle(parts):
        result.setdefault("cycles", []).append(
            {key: round(sum(part[key] for part in parts), 4) for key in parts[0]})
        result["timings"]["measure_s"] = round(time.time() - t, 1)

    t, cycle = time.time(), 0.0
    if args.reply_fd is not None:
        # Paired: the run asks for each cell in turn, alternating with the
        # other version's engine, and closes stdin to stop it.
        result["paired"] = True
        replies = os.fdopen(args.reply_fd, "w", buffering=1)
        save()
        replies.write("ready\n")
        parts = []
        for line in sys.stdin:
            command, _, cell = line.strip().partition(" ")
            cell, _, position = cell.partition(" ")
            if command == "warm":
                unrecorded_cycle()
                replies.write("done\n")
                continue
            if command == "host-profile":
                result["host_profile"] = profile_host(generate, prompts, Path(args.result))
                save()
                replies.write("done\n")
                continue
            if command != "cell" or cell not in cells or position not in POSITIONS:
                break
            prime(cell)
            parts.append(measure_cell(cell, position))
            if len(parts) == len(cells):
                add_cycle(parts)
                parts = []
            save()
            replies.write("done\n")
    else:
        kept = EXIT_MARGIN + (HOST_PROFILE_S if args.host_profile else 0.0)
        for _ in range(args.reps):
            if cycle and time.time() + 1.2 * cycle + kept > args.stop_at:
                result["errors"]["time_limit"] = "stopped early: the time limit was near"
                break
            parts = [measure_cell(cell) for cell in cells]
            add_cycle(parts)
            save()
            cycle = sum(part["wall_s"] for part in parts)
    if args.host_profile and args.reply_fd is None:
        result["host_profile"] = profile_host(generate, prompts, Path(args.result))
    if args.profile and ENGINES[args.name][1]:
        try:
            result["profile"] = profile_decode_steps(
                llm, prompts, params, Path(args.result), lambda: spec_counters(llm))
        except Exception:  # noqa: BLE001 - the figures above stand without it
            import traceback

            result["errors"]["profile"] = traceback.format_exc()[-2000:]
    result["timings"]["process_s"] = round(time.time() - started, 1)
    save()
    print(f"[{args.name}] done", flush=True)


def profile_host(generate, prompts, result_path: Path) -> dict:
    """cProfile over requests of the high regime, one at a time: where each
    version's host time goes, function by function. The profiler slows every
    Python call alike in both versions; only the comparison means anything.
    Files are named from their `vllm/` on, so both trees' names match."""
    import cProfile
    import io
    import pstats

    profiler, tokens = cProfile.Profile(), 0
    t = time.perf_counter()
    profiler.enable()
    for prompt in prompts["high"][:HOST_PROFILE_REQUESTS]:
        tokens += len(generate([prompt])[0])
    profiler.disable()
    elapsed = time.perf_counter() - t
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    top = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)
    functions = [{"function": f"{_short_path(file)}:{line}({name})", "calls": calls,
                  "own_s": round(own, 6), "with_callees_s": round(total, 6)}
                 for (file, line, name), (_, calls, own, total, _) in top[:HOST_PROFILE_ROWS]]
    stats.sort_stats("tottime").print_stats(HOST_PROFILE_ROWS)
    path = result_path.with_name(f"{result_path.stem}-host-profile.txt")
    path.write_text(f"{HOST_PROFILE_REQUESTS} requests one at a time, {tokens} tokens in "
                    f"{elapsed:.2f} s under the profiler\n{text.getvalue()}")
    return {"file": path.name, "tokens": tokens, "elapsed_s": round(elapsed, 3),
            "functions": functions}


def _short_path(file: str) -> str:
    _, marker, tail = file.rpartition("/vllm/")
    return f"vllm/{tail}" if marker else file


def profile_decode_steps(llm, prompts, params, result_path: Path, counters) -> dict:
    """torch.profiler over one engine step of the high regime once its
    requests decode, per load, driven step by step; kernels by CUDA time.
    The drafts the step made say how many decode steps it held."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    engine = llm.llm_engine
    written = {}
    for load, count in LOADS.items():
        for i, prompt in enumerate(prompts["high"][:count]):
            engine.add_request(f"profile-{load}-{i}", {"prompt_token_ids": prompt}, params)
        for _ in range(3):  # the prefill, then decode steps
            engine.step()
        torch.cuda.synchronize()
        before = counters()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            engine.step()
            torch.cuda.synchronize()
        drafts = counters().get("num_drafts", 0.0) - before.get("num_drafts", 0.0)
        while engine.has_unfinished_requests():
            engine.step()
        averages = prof.key_averages()
        try:
            table = averages.table(sort_by="self_device_time_total", row_limit=60)
        except (AttributeError, KeyError, ValueError):
            table = averages.table(sort_by="self_cuda_time_total", row_limit=60)
        path = result_path.with_name(f"{result_path.stem}-profile-{load}.txt")
        path.write_text(f"{count} requests, {drafts:.0f} drafts in the profiled step\n{table}")
        written[load] = {"file": path.name, "drafts": drafts}
    return written
