"""DFlash2's speed on the patched vLLM 0.27.1 against upstream 0.28.0, on a
GPU-bound target (Qwen3-8B's shape) at two known acceptance rates.

    python3 scripts/gpu/speed.py models --run DIR
    python3 scripts/gpu/speed.py run --run DIR --round N [--engines a,b,...]
                                     [--budget S] [--copy-to OUT] [--profile | --paired]
    python3 scripts/gpu/speed.py report --run DIR [--copy-to OUT]
    python3 scripts/gpu/speed.py plan

`models` writes the checkpoints (dflash2_backport/speed_models.py) once per
machine. `run` starts each engine of a round in its own process, one after
another, alone on the GPU: `base` and `dflash2` on 0.27.1 (/tmp/vt),
`up_base` and `up_dflash2` on 0.28.0 (/tmp/vt28), versions alternated and
the order flipped every other round. Each engine warms up, then repeats every
cell (regime high or low x load c1 or b32) until its repetitions are done or
the call's budget runs short, saving after every repetition. With
`--paired`, a kind's two engines share the GPU and take turns cell by cell,
so that the machine's slow spells fall on both. `report` reads every
round's files and prints the tables and verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dflash2_backport import speed_stats  # noqa: E402
from dflash2_backport.speed_models import (  # noqa: E402
    PROMPT_TOKENS,
    SPEED_SHAPES,
    write_speed_models,
)

SHAPE = "8b"
# engine: (tree, draft); trees as driver.py names them.
ENGINES = {"base": ("closure", None), "dflash2": ("closure", "dflash2"),
           "up_base": ("up", None), "up_dflash2": ("up", "dflash2")}
VERSIONS = {"closure": "0.27.1", "up": "0.28.0"}
REGIMES = ("high", "low")
LOADS = {"c1": 1, "b32": 32}
CELLS = [f"{regime}_{load}" for regime in REGIMES for load in LOADS]
C1_REQUESTS = 2
OUTPUT_TOKENS = 128
# Timed cycles per engine. A DFlash2 engine's repetitions spread four to
# eight times as much as a no-speculation engine's (its step waits on the
# host), and a cycle of its cells costs the same four seconds.
REPS = {"base": 8, "dflash2": 16}
WARMUPS = 2
# The host profile: requests of the high regime one at a time, and the
# functions kept by their own time.
HOST_PROFILE_REQUESTS = 8
HOST_PROFILE_ROWS = 60
# What a run keeps free for it: eight requests of a quarter second, slowed
# by the profiler.
HOST_PROFILE_S = 30.0
# One request and 32, each also as a verification step of 16 tokens a
# request: every decode step of every cell replays a captured graph.
CAPTURE_SIZES = [1, 16, 32, 512]
GPU_MEMORY_UTILIZATION = 0.3
# Seconds an engine needs to save its figures and exit after its last one.
EXIT_MARGIN = 20.0
MIN_ENGINE_S = 150.0
TIMING_PATTERNS = {
    "load_s": r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds",
    "compile_s": r"torch\.compile (?:and initial profiling/warmup run together )?"
                 r"took ([\d.]+) s in total",
    "capture_s": r"Graph capturing finished in ([\d.]+) secs",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
}


def round_order(round_number: int) -> list[str]:
    """A/B/A/B by version, each kind's pair in the other order every other
    round, so that neither version always runs first on a warm machine."""
    pairs = [("base", "up_base"), ("dflash2", "up_dflash2")]
    return [name for pair in pairs
            for name in (pair if round_number % 2 else pair[::-1])]


def engine_kwargs(name: str, models: dict) -> dict:
    """The LLM(...) arguments of an engine; builds nothing."""
    s = SPEED_SHAPES[SHAPE]
    _, draft = ENGINES[name]
    kwargs = dict(
        model=models["target"], dtype="bfloat16", skip_tokenizer_init=True, seed=0,
        max_model_len=PROMPT_TOKENS + OUTPUT_TOKENS + s["block_size"],
        max_num_seqs=max(LOADS.values()),
        gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
        kv_cache_memory_bytes=s["kv_bytes"], enforce_eager=False,
        disable_log_stats=False, enable_prefix_caching=False,
        attention_config={"backend": "TRITON_ATTN"},
        compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES},
    )
    if draft:
        kwargs["speculative_config"] = {
            "method": "dflash", "model": models[draft],
            "num_speculative_tokens": s["block_size"] - 1,
            "attention_backend": "TRITON_ATTN",
        }
    return kwargs


def parse_cpus(text: str) -> set[int]:
    """`0-7,12` -> {0, ..., 7, 12}: the cores an engine may run on."""
    cpus = set()
    for part in text.split(","):
        first, dash, last = part.partition("-")
        if not (first.isdigit() and (last.isdigit() if dash else not last)):
            raise argparse.ArgumentTypeError(f"cores as 0-7,12, not {text!r}")
        low, high = int(first), int(last or first)
        if high < low:
            raise argparse.ArgumentTypeError(f"{part}: a range runs upwards")
        cpus.update(range(low, high + 1))
    return cpus


def engine_reps(name: str, override: int | None = None) -> int:
    """Timed cycles of an engine: `override` when given, else its kind's."""
    if override is not None:
        return override
    return REPS["dflash2" if ENGINES[name][1] else "base"]


def engine_timings(log: str) -> dict:
    """vLLM's own start-up figures from an engine's log, summed where the
    target and the draft each report one."""
    found = {}
    for key, pattern in TIMING_PATTERNS.items():
        values = [float(v) for v in re.findall(pattern, log)]
        if values:
            found[key] = round(sum(values), 1)
    return found


# --------------------------------------------------------------------------
# One engine (its own process)
# --------------------------------------------------------------------------

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
    result = {"engine": args.name, "round": args.round, "version": VERSIONS[ENGINES[args.name][0]],
              "cells": {}, "timings": {}, "errors": {}}
    result_path = Path(args.result)

    def save():
        result_path.write_text(json.dumps(result))

    import vllm
    from vllm import LLM, SamplingParams

    from dflash2_backport.gpu_probes import counter_delta, spec_counters

    result["vllm_file"] = vllm.__file__
    result["timings"]["import_s"] = round(time.time() - started, 1)
    t = time.time()
    llm = LLM(**engine_kwargs(args.name, models))
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

    t = time.time()
    for _ in range(args.warmups):
        for cell in CELLS:
            repetition(cell)
    result["timings"]["warmup_s"] = round(time.time() - t, 1)
    # What the host gave the step once vLLM had set itself up: the cores the
    # process may use and torch's CPU threads (0.28.0 drops to one after
    # its warm-up unless OMP_NUM_THREADS is set; 0.27.1 keeps the default).
    import torch

    result["host"] = {"cpus": len(os.sched_getaffinity(0)),
                      "torch_threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}

    def measure_cell(cell):
        """One repetition of `cell`, recorded; its time and host usage."""
        cell_start, host_before = time.time(), host_usage()
        rate, per_request, counters, out = repetition(cell)
        entry = result["cells"].setdefault(cell, {"reps": [], "per_request": [],
                                                  "counters": []})
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
        save()

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
            if command == "host-profile":
                result["host_profile"] = profile_host(generate, prompts, Path(args.result))
                save()
                replies.write("done\n")
                continue
            if command != "cell" or cell not in CELLS:
                break
            parts.append(measure_cell(cell))
            if len(parts) == len(CELLS):
                add_cycle(parts)
                parts = []
            save()
            replies.write("done\n")
    else:
        for _ in range(args.reps):
            kept = EXIT_MARGIN + (HOST_PROFILE_S if args.host_profile else 0.0)
            if cycle and time.time() + 1.2 * cycle + kept > args.stop_at:
                result["errors"]["budget"] = "stopped early: the call's budget ran short"
                break
            parts = [measure_cell(cell) for cell in CELLS]
            add_cycle(parts)
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
    stats = pstats.Stats(profiler)
    top = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)
    functions = [{"function": f"{_short_path(file)}:{line}({name})", "calls": calls,
                  "own_s": round(own, 6), "with_callees_s": round(total, 6)}
                 for (file, line, name), (_, calls, own, total, _) in top[:HOST_PROFILE_ROWS]]
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(HOST_PROFILE_ROWS)
    path = result_path.with_name(f"{result_path.stem}-host-profile.txt")
    path.write_text(f"{HOST_PROFILE_REQUESTS} requests one at a time, {tokens} tokens in "
                    f"{elapsed:.2f} s under the profiler\n{text.getvalue()}")
    return {"file": path.name, "tokens": tokens, "elapsed_s": round(elapsed, 3),
            "functions": functions}


def _short_path(file: str) -> str:
    head, marker, tail = file.rpartition("/vllm/")
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
            table = averages.table(sort_by="self_device_time_total", row_limit=30)
        except (AttributeError, KeyError, ValueError):
            table = averages.table(sort_by="self_cuda_time_total", row_limit=30)
        path = result_path.with_name(f"{result_path.stem}-profile-{load}.txt")
        path.write_text(f"{count} requests, {drafts:.0f} drafts in the profiled step\n{table}")
        written[load] = {"file": path.name, "drafts": drafts}
    return written


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

ARCHIVE = "speed-run.tgz"


def _copy(run: Path, target: Path | None) -> None:
    """Everything a run has so far (results, logs, report), as one archive
    in `target`: a machine that hands back only a few files hands back
    this one whole, and a call cut short leaves the last complete one."""
    if target is None:
        return
    import tarfile

    target.mkdir(parents=True, exist_ok=True)
    partial = target / (ARCHIVE + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        for name in ("results", "logs", "report.txt", "report.json"):
            if (run / name).exists():
                archive.add(run / name, arcname=name)
    os.replace(partial, target / ARCHIVE)


def run_round(args) -> int:
    run = args.run
    models = run / "models.json"
    if not models.is_file():
        raise SystemExit(f"{models} is missing: run `speed.py models --run {run}` first")
    if args.cpus and not args.cpus <= os.sched_getaffinity(0):
        raise SystemExit(f"--cpus: cores {sorted(args.cpus - os.sched_getaffinity(0))} are not "
                         f"this process's to give; it has {sorted(os.sched_getaffinity(0))}")
    names = args.engines.split(",") if args.engines else round_order(args.round)
    if args.paired:
        pairs = [names[i:i + 2] for i in range(0, len(names), 2)]
        if any(len(pair) != 2 or {ENGINES[n][1] for n in pair} != {ENGINES[pair[0]][1]}
               or {ENGINES[n][0] for n in pair} != set(VERSIONS) for pair in pairs):
            raise SystemExit(f"--paired: engines go in pairs of one kind, one of each "
                             f"version, as base,up_base or up_dflash2,dflash2; not {names}")
        if args.profile:
            raise SystemExit("--paired: --profile needs an engine alone on the GPU; "
                             "profile in a round without --paired")
    (run / "results").mkdir(parents=True, exist_ok=True)
    (run / "logs").mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.budget
    if args.paired:
        failed = sum(run_pair(args, pair, deadline) for pair in pairs)
        return 1 if failed else 0
    failed = 0
    for name in names:
        left = deadline - time.time()
        if left < args.min_engine_s:
            print(f"[round {args.round} {name}] skipped: {left:.0f} s of the budget left",
                  flush=True)
            failed += 1
            continue
        engine = Engine(args, name, deadline)
        try:
            engine.proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            engine.proc.kill()
        failed += engine.finish()
    return 1 if failed else 0


class Engine:
    """One engine's process, its log and its result file. Paired, it also
    takes commands on its stdin and answers on a pipe of its own, so that
    vLLM's output stays in the log."""

    def __init__(self, args, name: str, deadline: float, paired: bool = False):
        import driver

        self.args, self.name, self.started = args, name, time.time()
        tree = ENGINES[name][0]
        trees = {"closure": args.tree_0271, "up": args.tree_0280}
        # The target's torch.compile cache is shared by a version's engines
        # and by its later rounds: only the first start compiles.
        self.env = driver._engine_env(dict(os.environ), tree, trees, args.site, args.run,
                                      f"cache-{VERSIONS[tree]}")
        # The engine core in this process, where the profiler sees its kernels;
        # FlashInfer's sampler is not on the machine.
        self.env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        if args.torch_threads:
            self.env["OMP_NUM_THREADS"] = str(args.torch_threads)
        stem = f"round{args.round}-{name}"
        self.result = args.run / "results" / f"{stem}.json"
        self.log_path = args.run / "logs" / f"{stem}.log"
        command = [sys.executable, __file__, "engine", "--name", name,
                   "--round", str(args.round), "--models", str(args.run / "models.json"),
                   "--result", str(self.result), "--reps", str(engine_reps(name, args.reps)),
                   "--warmups", str(args.warmups), "--stop-at", str(deadline)]
        if args.profile:
            command.append("--profile")
        if args.host_profile and not paired:
            command.append("--host-profile")
        self.replies, writer, self.buffer = None, None, b""
        if paired:
            self.replies, writer = os.pipe()
            command += ["--reply-fd", str(writer)]
        with open(self.log_path, "w") as log:
            # The affinity is set in the child before it starts, so that the
            # engine and every thread and process it makes inherit it.
            pin = (lambda: os.sched_setaffinity(0, args.cpus)) if args.cpus else None
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                stdin=subprocess.PIPE if paired else subprocess.DEVNULL, preexec_fn=pin,
                pass_fds=(writer,) if paired else ())
        if writer is not None:
            os.close(writer)

    def ask(self, command: str | None, until: float) -> str | None:
        """Send `command` (None: only wait), then the engine's answer, or None
        when it exits or `until` passes first."""
        import select

        try:
            if command is not None:
                self.proc.stdin.write(f"{command}\n".encode())
                self.proc.stdin.flush()
            while b"\n" not in self.buffer:
                # A process the engine started may hold the pipe open after
                # the engine itself died, so its exit is checked too.
                ready, _, _ = select.select([self.replies], [], [],
                                            min(1.0, max(0.0, until - time.time())))
                if ready:
                    chunk = os.read(self.replies, 256)
                    if not chunk:
                        return None
                    self.buffer += chunk
                elif self.proc.poll() is not None or time.time() >= until:
                    return None
        except OSError:  # its stdin closed: it has exited
            return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def finish(self) -> int:
        """Stop the engine (a paired one is told to), record how it went;
        1 if it failed."""
        if self.replies is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            os.close(self.replies)
        try:
            self.proc.wait(timeout=EXIT_MARGIN)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        text = self.log_path.read_text(errors="replace")
        figures = json.loads(self.result.read_text()) if self.result.is_file() else {}
        figures.setdefault("timings", {}).update(engine_timings(text))
        figures["timings"]["wall_s"] = round(time.time() - self.started, 1)
        figures["exit"] = self.proc.returncode
        figures["cache_root"] = self.env["VLLM_CACHE_ROOT"]
        self.result.write_text(json.dumps(figures))
        print(f"[round {self.args.round} {self.name}] exit {self.proc.returncode}: "
              + timing_line(figures), flush=True)
        if self.proc.returncode != 0:
            import driver

            print(driver.log_tail(text, 8), flush=True)
        _copy(self.args.run, self.args.copy_to)
        return int(self.proc.returncode != 0)


def run_pair(args, pair: list[str], deadline: float) -> int:
    """Both versions' engines of one kind on the GPU at once, started one
    after the other (each measures its memory alone), then each cell run by
    one and at once by the other, who goes first alternating from cell to
    cell and from cycle to cycle. A slow spell of the machine lasts about a
    second, longer than a cell and shorter than a cycle of cells, so it falls
    on both figures of a pair. The number of failed engines."""
    engines: list[Engine] = []
    for name in pair:
        left = deadline - time.time()
        if left < args.min_engine_s:
            print(f"[round {args.round} {name}] skipped: {left:.0f} s of the budget left",
                  flush=True)
            break
        engine = Engine(args, name, deadline, paired=True)
        engines.append(engine)
        if engine.ask(None, deadline - EXIT_MARGIN) != "ready":
            break
    cycles, longest = 0, 0.0
    kept = EXIT_MARGIN + (2 * HOST_PROFILE_S if args.host_profile else 0.0)
    if len(engines) == 2 and all(e.proc.poll() is None for e in engines):
        while cycles < engine_reps(pair[0], args.reps):
            if time.time() + 1.2 * longest + kept > deadline:
                break
            t = time.time()
            # all() stops at the first engine that does not answer.
            if not all(engine.ask(f"cell {cell}", deadline) == "done"
                       for i, cell in enumerate(CELLS)
                       for engine in (engines if (cycles + i) % 2 == 0 else engines[::-1])):
                break
            cycles, longest = cycles + 1, max(longest, time.time() - t)
        if args.host_profile:
            # Each alone in turn; the other waits idle.
            for engine in engines:
                if engine.ask("host-profile", deadline) != "done":
                    break
    print(f"[round {args.round} {','.join(pair)}] {cycles} paired cycles", flush=True)
    return sum(engine.finish() for engine in engines) + 2 - len(engines)


def timing_line(figures: dict) -> str:
    t = figures.get("timings", {})
    reps = len(next(iter(figures.get("cells", {}).values()), {}).get("reps", []))

    def s(key):
        return f"{t[key]:.0f} s" if key in t else "-"

    host = figures.get("host")
    return (f"wall {s('wall_s')}; import {s('import_s')}, start {s('startup_s')} "
            f"(load {s('load_s')}, compile {s('compile_s')}, capture {s('capture_s')}, "
            f"init engine {s('init_engine_s')}), warm-up {s('warmup_s')}, "
            f"measurement {s('measure_s')} for {reps} repetitions"
            + (f"; {host['cpus']} cores, {host['torch_threads']} torch threads" if host else "")
            + cycle_line(figures.get("cycles", [])))


def cycle_line(cycles: list[dict]) -> str:
    """Per repetition's cycle of cells, medians: the CPU time its threads
    took against the wall time, and how often the host took a core away."""
    if not cycles:
        return ""

    def median(key):
        return float(np.median([c[key] for c in cycles]))

    share = float(np.median([c["cpu_s"] / c["wall_s"] for c in cycles]))
    return (f"; a cycle {median('wall_s'):.2f} s, CPU {share:.2f} "
            f"of wall, {median('involuntary'):.0f} involuntary and "
            f"{median('voluntary'):.0f} voluntary switches, {median('gc'):.0f} GC runs"
            + (f", {median('steal_s'):.2f} s stolen by the hypervisor"
               if all("steal_s" in c for c in cycles) else ""))


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def load_results(run: Path) -> dict:
    """engine -> round -> its result file's contents."""
    found: dict[str, dict[int, dict]] = {}
    for path in sorted((run / "results").glob("round*-*.json")):
        data = json.loads(path.read_text())
        if "engine" in data:
            found.setdefault(data["engine"], {})[int(data["round"])] = data
    return found


def cell_rounds(results: dict, engine: str, cell: str) -> list[list[float]]:
    return [r["cells"][cell]["reps"] for _, r in sorted(results.get(engine, {}).items())
            if r.get("cells", {}).get(cell, {}).get("reps")]


def ratio_by_round(results: dict, cell: str) -> dict[int, float]:
    """The ratio of speedups from each round's own medians, for every round
    both DFlash2 engines ran; a round without its no-speculation engines
    takes their medians over all rounds."""
    def medians(engine):
        return {n: float(np.median(r["cells"][cell]["reps"]))
                for n, r in results.get(engine, {}).items()
                if r.get("cells", {}).get(cell, {}).get("reps")}

    ours, theirs = medians("dflash2"), medians("up_dflash2")
    ours_base, up_base = medians("base"), medians("up_base")
    if not (ours_base and up_base):
        return {}
    pooled = {"ours": speed_stats.pooled_median(cell_rounds(results, "base", cell)),
              "up": speed_stats.pooled_median(cell_rounds(results, "up_base", cell))}
    found = {}
    for n in sorted(set(ours) & set(theirs)):
        both = n in ours_base and n in up_base
        base_ratio = (ours_base[n] / up_base[n]) if both else pooled["ours"] / pooled["up"]
        found[n] = ours[n] / theirs[n] / base_ratio
    return found


def pair_rounds(results: dict, ours: str, up: str, cell: str) -> dict[int, list[float]] | None:
    """Round -> ours / up's of each pair of cycles run back to back, when
    every round of both engines ran paired and gave pairs; else None, and
    the report judges the rounds unpaired."""
    mine, theirs = results.get(ours, {}), results.get(up, {})
    if not mine or set(mine) != set(theirs) or not all(
            r.get("paired") for r in (*mine.values(), *theirs.values())):
        return None
    found = {}
    for n in sorted(mine):
        a, b = (r[n].get("cells", {}).get(cell, {}).get("reps", []) for r in (mine, theirs))
        if a and b:
            found[n] = [x / y for x, y in zip(a, b)]
    return found or None


def acceptance_length(results: dict, engine: str, cell: str) -> float | None:
    drafts = accepted = 0.0
    for r in results.get(engine, {}).values():
        for counters in r.get("cells", {}).get(cell, {}).get("counters", []):
            drafts += counters.get("num_drafts", 0.0)
            accepted += counters.get("num_accepted_tokens", 0.0)
    return 1 + accepted / drafts if drafts else None


def summarize(results: dict) -> dict:
    """Per cell: each version's medians, speedup, acceptance, and the ratio
    of speedups with its verdict; cells without data are left out."""
    summary = {}
    for cell in CELLS:
        rows, rounds = {}, {}
        for version, prefix in (("0.27.1", ""), ("0.28.0", "up_")):
            base = cell_rounds(results, f"{prefix}base", cell)
            spec = cell_rounds(results, f"{prefix}dflash2", cell)
            rounds[version] = (base, spec)
            if not (base or spec):
                continue
            # A version with one engine so far still shows that engine's figure.
            rows[version] = {
                "base": speed_stats.median_interval(base) if base else None,
                "dflash2": speed_stats.median_interval(spec) if spec else None,
                "speedup": speed_stats.speedup_interval(base, spec) if base and spec else None,
                "acceptance_length": acceptance_length(results, f"{prefix}dflash2", cell),
                "rounds": len(spec or base), "reps": sum(map(len, spec or base)),
            }
        entry = {"rows": rows}
        base_pairs = pair_rounds(results, "base", "up_base", cell)
        spec_pairs = pair_rounds(results, "dflash2", "up_dflash2", cell)
        if base_pairs and spec_pairs:
            entry["ratio"] = speed_stats.paired_ratio_of_speedups(
                list(base_pairs.values()), list(spec_pairs.values()))
            pooled = speed_stats.pooled_median(list(base_pairs.values()))
            entry["ratio"]["by_round"] = {
                n: float(np.median(pairs)) / (float(np.median(base_pairs[n]))
                                              if base_pairs.get(n) else pooled)
                for n, pairs in spec_pairs.items()}
        elif all(base and spec for base, spec in rounds.values()):
            entry["ratio"] = speed_stats.ratio_of_speedups(
                *rounds["0.27.1"], *rounds["0.28.0"])
            entry["ratio"]["by_round"] = ratio_by_round(results, cell)
        summary[cell] = entry
    return summary


def _ci(interval: dict | None, digits: int = 0) -> str:
    if interval is None:
        return "-"
    return (f"{interval['point']:.{digits}f} [{interval['lo']:.{digits}f}, "
            f"{interval['hi']:.{digits}f}]")


def host_profile_lines(results: dict, rows: int = 12) -> list[str]:
    """Per round both DFlash2 engines profiled their host side: the
    functions whose own time per output token differs most between the
    versions (matched by file and name: their lines differ)."""
    lines = []
    ours, theirs = results.get("dflash2", {}), results.get("up_dflash2", {})
    for n in sorted(set(ours) & set(theirs)):
        profiles = [r[n].get("host_profile") for r in (ours, theirs)]
        if not all(profiles):
            continue
        per_token = [{re.sub(r":\d+\(", "(", f["function"]): 1e6 * f["own_s"] / p["tokens"]
                      for f in p["functions"]} for p in profiles]
        total = [1e6 * p["elapsed_s"] / p["tokens"] for p in profiles]
        lines.append(f"host profile, round {n}, us of own time per output token under "
                     f"cProfile (0.27.1 / 0.28.0; all: {total[0]:.0f} / {total[1]:.0f}):")
        names = sorted(set(per_token[0]) | set(per_token[1]),
                       key=lambda f: -abs(per_token[0].get(f, 0.0) - per_token[1].get(f, 0.0)))
        for name in names[:rows]:
            mine, up = (f"{t[name]:.1f}" if name in t else "-" for t in per_token)
            lines.append(f"  {mine:>8} / {up:>8}  {name}")
    return lines


def format_report(summary: dict) -> str:
    lines = []
    for cell, entry in summary.items():
        regime, load = cell.split("_")
        lines.append(f"== {regime} acceptance, {load} "
                     f"({'1 request at a time' if LOADS[load] == 1 else '32 at once'}): "
                     "output tokens/s, median [95% CI]")
        lines.append(f"{'version':<8} {'no spec':>22} {'DFlash2':>22} {'speedup':>22} "
                     f"{'accept len':>10} {'reps':>9}")
        for version, row in entry["rows"].items():
            length = row["acceptance_length"]
            lines.append(
                f"{version:<8} {_ci(row['base']):>22} {_ci(row['dflash2']):>22} "
                f"{_ci(row['speedup'], 3):>22} "
                f"{(f'{length:.2f}' if length else '-'):>10} "
                f"{row['reps']:>3} in {row['rounds']:>1}")
        ratio = entry.get("ratio")
        if ratio:
            paired = " (cycles paired)" if ratio.get("paired") else ""
            lines.append(f"speedup ratio 0.27.1 / 0.28.0{paired}: {_ci(ratio, 3)} "
                         f"(+-{100 * ratio['half_width']:.1f}%): {ratio['verdict']}")
            if ratio.get("by_round"):
                lines.append("  each round's own: " + ", ".join(
                    f"round {n} {value:.3f}" for n, value in ratio["by_round"].items()))
        else:
            lines.append("speedup ratio: both versions' base and DFlash2 figures needed")
        lines.append("")
    goal = summary.get("high_c1", {}).get("rows", {}).get("0.27.1")
    if goal and goal["speedup"]:
        speedup = goal["speedup"]
        met = "met" if speedup["point"] >= 2.0 else "SHORT: run with --profile"
        lines.append(f"high acceptance, 1 request at a time, 0.27.1: DFlash2 "
                     f"{_ci(speedup, 2)}x no speculation (expected >= 2x: {met})")
    return "\n".join(lines)


def report(args) -> int:
    results = load_results(args.run)
    summary = summarize(results)
    text = format_report(summary)
    timing = [f"round {n} {engine}: {timing_line(r)}"
              for engine, rounds in sorted(results.items())
              for n, r in sorted(rounds.items())]
    text = text + "\n\nper process:\n" + "\n".join(timing)
    compared = host_profile_lines(results)
    if compared:
        text += "\n\n" + "\n".join(compared)
    print(text)
    for target in (args.run, args.copy_to):
        if target is not None:
            target.mkdir(parents=True, exist_ok=True)
            (target / "report.txt").write_text(text + "\n")
            (target / "report.json").write_text(json.dumps(summary, indent=1))
    _copy(args.run, args.copy_to)
    verdicts = [e["ratio"]["verdict"] for e in summary.values() if "ratio" in e]
    return 0 if verdicts and all(v == "PASS" for v in verdicts) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    models = sub.add_parser("models", help="write the checkpoints (kept when there)")
    models.add_argument("--run", type=Path, required=True)
    run = sub.add_parser("run", help="one round of engines, results appended")
    run.add_argument("--run", type=Path, required=True)
    run.add_argument("--round", type=int, required=True)
    run.add_argument("--engines", default="",
                     help=f"comma-separated, run in this order (default: round_order); "
                          f"among {sorted(ENGINES)}")
    run.add_argument("--budget", type=float, default=540.0,
                     help="seconds this call may spend on engines; each stops "
                          "repeating in time to save, and one that would start "
                          "with less than --min-engine-s left is skipped")
    run.add_argument("--min-engine-s", type=float, default=MIN_ENGINE_S)
    run.add_argument("--reps", type=int, default=None,
                     help=f"timed cycles of every engine (default: {REPS})")
    run.add_argument("--warmups", type=int, default=WARMUPS)
    run.add_argument("--profile", action="store_true",
                     help="DFlash2 engines also profile a decode step per load")
    run.add_argument("--copy-to", type=Path)
    run.add_argument("--host-profile", action="store_true",
                     help="each engine also profiles its host side (cProfile) over "
                          "requests one at a time, after its repetitions")
    run.add_argument("--paired", action="store_true",
                     help="each pair of engines on the GPU at once, their cycles "
                          "alternated (--engines in pairs of one kind)")
    run.add_argument("--cpus", type=parse_cpus,
                     help="cores every engine is pinned to, as 0-7,12 (default: all)")
    run.add_argument("--torch-threads", type=int,
                     help="OMP_NUM_THREADS for every engine, so that both versions "
                          "run torch's CPU work on as many threads")
    run.add_argument("--tree-0271", default="/tmp/vt")
    run.add_argument("--tree-0280", default="/tmp/vt28")
    run.add_argument("--site", default="/tmp/site")
    rep = sub.add_parser("report", help="tables and verdicts from every round")
    rep.add_argument("--run", type=Path, required=True)
    rep.add_argument("--copy-to", type=Path)
    sub.add_parser("plan", help="print each engine's arguments and the round order")
    engine = sub.add_parser("engine", help=argparse.SUPPRESS)
    engine.add_argument("--name", required=True, choices=sorted(ENGINES))
    engine.add_argument("--round", type=int, required=True)
    engine.add_argument("--models", required=True)
    engine.add_argument("--result", required=True)
    engine.add_argument("--reps", type=int, required=True)
    engine.add_argument("--warmups", type=int, default=WARMUPS)
    engine.add_argument("--stop-at", type=float, required=True)
    engine.add_argument("--profile", action="store_true")
    engine.add_argument("--reply-fd", type=int)
    engine.add_argument("--host-profile", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "models":
        t = time.time()
        args.run.mkdir(parents=True, exist_ok=True)
        paths = write_speed_models(args.run / "models", SHAPE)
        (args.run / "models.json").write_text(json.dumps(paths, indent=1))
        print(json.dumps(paths, indent=1))
        print(f"models: {time.time() - t:.0f} s", flush=True)
        return 0
    if args.command == "plan":
        paths = {"target": "TARGET", "dflash2": "DFLASH2", "prompts": "PROMPTS"}
        print(json.dumps({"order": {n: round_order(n) for n in (1, 2)},
                          "engines": {n: engine_kwargs(n, paths) for n in ENGINES}},
                         indent=1))
        return 0
    if args.command == "engine":
        run_engine(args)
        return 0
    if args.command == "run":
        unknown = [n for n in args.engines.split(",") if n and n not in ENGINES]
        if unknown:
            parser.error(f"unknown engines {unknown}; known: {sorted(ENGINES)}")
        return run_round(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
