"""DFlash2's speed on the patched vLLM 0.27.1 against upstream 0.28.0 (and
the newest upstream release, when its tree is there), on a GPU-bound target
(Qwen3-8B's shape) at two known acceptance rates.

    python3 scripts/gpu/speed.py models --run DIR
    python3 scripts/gpu/speed.py run --run DIR --round N [--engines a,b,...]
                                     [--time-limit S] [--copy-to OUT] [--profile | --paired]
                                     [--cells low_c1,...] [--main-cpu C]
                                     [--attention-backend NAME|auto]
                                     [--tree-new TREE] [--python-0271 PY] [--python-0280 PY]
                                     [--pending]
    python3 scripts/gpu/speed.py report --run DIR [--copy-to OUT]
    python3 scripts/gpu/speed.py summary --run DIR [--check]
    python3 scripts/gpu/speed.py plan [--tree-new TREE]

`models` writes the checkpoints (speed_models.py) once per
machine. `run` starts each engine of a round in its own process, one after
another, alone on the GPU: `base` and `dflash2` on 0.27.1 (/tmp/vt),
`up_base` and `up_dflash2` on 0.28.0 (/tmp/vt28), and, when /tmp/vtnew holds
a vLLM with its METADATA, `new_base` and `new_dflash2` on that release;
the versions' order rotates from round to round (two: flipped every other
round). `--python-0271` and the like run a version's engines in a venv's
interpreter, vLLM installed by pip, instead of its tree on PYTHONPATH.
Each engine warms up, then repeats every
cell (regime high or low x load c1 or b32), or those `--cells` names, until its
repetitions are done or the time limit (`--time-limit`) is near, saving after every
repetition. With
`--paired`, a kind's two engines share the GPU and take turns cell by cell,
so that the machine's slow spells fall on both (0.27.1 and one upstream
version at a time). `report` reads every round's files and prints the
tables and verdicts: 0.27.1's speedup over each upstream version's, and
writes them with summary.md, the run's facts (date, GPU, torch, vLLM
versions, attention backend, configuration) and each cell's verdict, all
read from the result files. `summary` writes summary.md alone; with
`--check`, it exits 1 where the summary there is not what the files make.

This file starts and drives the engines; what they run is in speed_plan.py,
an engine's own process in speed_engine.py, the report in speed_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_engine import run_engine  # noqa: E402
from speed_models import write_speed_models  # noqa: E402
from speed_plan import (  # noqa: E402
    ATTENTION_BACKEND,
    AUTO,
    CELLS,
    ENGINES,
    EXIT_MARGIN,
    HOST_PROFILE_S,
    POSITIONS,
    REPS,
    SHAPE,
    TWO_VERSIONS,
    VERSIONS,
    WARMUPS,
    engine_kwargs,
    engine_reps,
    round_order,
)
from speed_report import (  # noqa: E402
    attention_seen,
    backend_of,
    copy_run,
    engine_timings,
    load_results,
    report,
    summary,
    timing_line,
)

MIN_ENGINE_S = 150.0


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


def parse_cells(text: str) -> list[str]:
    """`low_c1,high_c1` -> ['high_c1', 'low_c1']: cells of the plan, each
    once, in the plan's order whatever the order given."""
    cells = [c for c in text.split(",") if c]
    if not cells or set(cells) - set(CELLS) or len(set(cells)) != len(cells):
        raise argparse.ArgumentTypeError(f"some of {CELLS}, each once; not {text!r}")
    return [c for c in CELLS if c in cells]


def venv_version(python: str) -> str:
    """The vLLM version installed in a venv's interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        found = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
            capture_output=True, text=True, env=env, timeout=120)
    except OSError as exc:
        raise SystemExit(f"{python}: {exc}") from None
    if found.returncode != 0 or not found.stdout.strip():
        raise SystemExit(f"{python} has no vLLM installed: {found.stderr.strip()[-300:]}")
    return found.stdout.strip().splitlines()[-1]


def run_versions(args) -> dict[str, str]:
    """Tree -> the version it runs: 0.27.1 and 0.28.0, and the newest
    upstream when its tree has a vllm-*.dist-info/METADATA beside its vllm/
    (or --python-new names a venv with vLLM): the engines a run knows."""
    import driver

    for tree, python in pythons_of(args).items():
        if not os.access(python, os.X_OK):
            raise SystemExit(f"--python for {VERSIONS.get(tree, 'the newest')}: "
                             f"{python} is not an interpreter here")
    versions = {tree: VERSIONS[tree] for tree in TWO_VERSIONS}
    for tree, python in pythons_of(args).items():
        # A venv of another version than its flag names would be labelled
        # wrongly in every result.
        if tree in versions and venv_version(python).split("+")[0] != versions[tree]:
            raise SystemExit(f"{python} has vLLM {venv_version(python)}, not "
                             f"{versions[tree]}")
    newest = (venv_version(args.python_new) if getattr(args, "python_new", None)
              else driver.newest_version(args.tree_new))
    if newest:
        versions["new"] = newest
    return versions


def pythons_of(args) -> dict[str, str]:
    """Tree -> the venv interpreter its engines run in, for those given."""
    given = {"closure": getattr(args, "python_0271", None),
             "up": getattr(args, "python_0280", None), "new": getattr(args, "python_new", None)}
    return {tree: python for tree, python in given.items() if python}


def cache_name(version: str, backend: str, venv: bool) -> str:
    """A version's compile cache; one of its own per attention backend
    other than the default, and for a venv's install."""
    return (f"cache-{version}" + ("" if backend == ATTENTION_BACKEND else f"-{backend}")
            + ("-venv" if venv else ""))


def check_pairs(names: list[str]) -> list[list[str]]:
    """A paired round's engines, two by two: one kind, 0.27.1 and one
    upstream version."""
    pairs = [names[i:i + 2] for i in range(0, len(names), 2)]
    if any(len(pair) != 2 or ENGINES[pair[0]][1] != ENGINES[pair[1]][1]
           or {ENGINES[n][0] for n in pair} not in ({"closure", "up"}, {"closure", "new"})
           for pair in pairs):
        raise SystemExit(f"--paired: engines go in pairs of one kind, 0.27.1 and one "
                         f"upstream version, as base,up_base or up_dflash2,dflash2 or "
                         f"new_base,base; not {names}")
    return pairs


def run_round(args) -> int:
    run = args.run
    models = run / "models.json"
    if not models.is_file():
        raise SystemExit(f"{models} is missing: run `speed.py models --run {run}` first")
    args.versions = run_versions(args)
    backend = args.attention_backend
    # One run directory, one backend: its report compares like with like.
    others = sorted({f"{engine} round {n}: {backend_of(r)}"
                     for engine, rounds in load_results(run).items()
                     for n, r in rounds.items() if backend_of(r) != backend})
    if others:
        raise SystemExit(f"--attention-backend {backend}: {run} holds results of another "
                         f"backend ({', '.join(others[:4])}); give this one a --run of its own")
    if args.cpus and not args.cpus <= os.sched_getaffinity(0):
        raise SystemExit(f"--cpus: cores {sorted(args.cpus - os.sched_getaffinity(0))} are not "
                         f"this process's to give; it has {sorted(os.sched_getaffinity(0))}")
    cores = args.cpus or os.sched_getaffinity(0)
    if args.main_cpu is not None and args.main_cpu not in cores:
        raise SystemExit(f"--main-cpu: core {args.main_cpu} is not among the engines' cores "
                         f"{sorted(cores)}")
    names = (args.engines.split(",") if args.engines
             else round_order(args.round, tuple(args.versions)))
    missing = [n for n in names if ENGINES[n][0] not in args.versions]
    if missing:
        raise SystemExit(f"{missing}: no newest upstream tree, no vllm-*.dist-info/METADATA "
                         f"under {args.tree_new} (--tree-new; or --python-new)")
    if args.paired:
        if not args.engines and len(args.versions) > 2:
            raise SystemExit(
                f"--paired compares 0.27.1 with one upstream version at a time, and this "
                f"run has three ({', '.join(args.versions.values())}): name the pairs "
                f"with --engines, as base,up_base,dflash2,up_dflash2 or "
                f"base,new_base,dflash2,new_dflash2, in rounds of their own")
        pairs = check_pairs(names)
        if args.profile:
            raise SystemExit("--paired: --profile needs an engine alone on the GPU; "
                             "profile in a round without --paired")
    if len(set(names)) != len(names):
        raise SystemExit(f"an engine runs once a round (its file is roundN-ENGINE.json); "
                         f"not {names}")
    if args.pending:
        if args.paired:
            raise SystemExit("--pending picks engines one by one; a paired round names "
                             "its pairs with --engines")
        done = [n for n in names
                if load_results(run).get(n, {}).get(args.round, {}).get("exit") == 0]
        names = [n for n in names if n not in done]
        print(f"[round {args.round}] done already: {','.join(done) or 'none'}; "
              f"to run: {','.join(names) or 'none'}", flush=True)
    (run / "results").mkdir(parents=True, exist_ok=True)
    (run / "logs").mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.time_limit
    if args.paired:
        failed = sum(run_pair(args, pair, deadline) for pair in pairs)
        return 1 if failed else 0
    failed = 0
    for name in names:
        left = deadline - time.time()
        if left < args.min_engine_s:
            print(f"[round {args.round} {name}] skipped: {left:.0f} s of the time limit left",
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

    def __init__(self, args, name: str, deadline: float, paired: bool = False,
                 partner: str | None = None):
        self.args, self.name, self.started = args, name, time.time()
        self.partner = partner
        tree = ENGINES[name][0]
        python = pythons_of(args).get(tree)
        # The target's torch.compile cache is shared by a version's engines
        # and by its later rounds: only the first start compiles.
        self.env = engine_env(args, tree, cache_name(args.versions[tree],
                                                     args.attention_backend, bool(python)))
        # The engine core in this process, where the profiler sees its kernels.
        self.env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if not python:
            # The bundle's trees come without FlashInfer; a venv made by pip
            # has it, and there vLLM's own default (its sampler on CUDA) holds.
            self.env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        if args.torch_threads:
            self.env["OMP_NUM_THREADS"] = str(args.torch_threads)
        stem = f"round{args.round}-{name}"
        self.result = args.run / "results" / f"{stem}.json"
        self.log_path = args.run / "logs" / f"{stem}.log"
        command = [python or sys.executable, __file__, "engine", "--name", name,
                   "--round", str(args.round), "--models", str(args.run / "models.json"),
                   "--result", str(self.result), "--reps", str(engine_reps(name, args.reps)),
                   "--warmups", str(args.warmups), "--stop-at", str(deadline),
                   "--cells", ",".join(args.cells),
                   "--attention-backend", args.attention_backend]
        if tree not in VERSIONS:
            command += ["--vllm-version", args.versions[tree]]
        if args.profile:
            command.append("--profile")
        if args.host_profile and not paired:
            command.append("--host-profile")
        if args.main_cpu is not None:
            command += ["--main-cpu", str(args.main_cpu)]
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
        figures.setdefault("attention_backend", self.args.attention_backend)
        figures["cache_root"] = self.env["VLLM_CACHE_ROOT"]
        if self.partner:
            figures["partner"] = self.partner
        seen = attention_seen(text)
        if seen:
            figures["attention_seen"] = seen
        self.result.write_text(json.dumps(figures))
        print(f"[round {self.args.round} {self.name}] exit {self.proc.returncode}: "
              + timing_line(figures), flush=True)
        if self.proc.returncode != 0:
            import driver

            print(driver.log_tail(text, 8), flush=True)
        copy_run(self.args.run, self.args.copy_to)
        return int(self.proc.returncode != 0)


def engine_env(args, tree: str, cache: str) -> dict:
    """An engine's environment: its tree first on PYTHONPATH (driver.py's
    rule: the tree's .pythonpath, else the tree then --site); for a venv's
    interpreter, PYTHONPATH without any tree or wheels of the run's, so
    that the venv's own vLLM is the one imported."""
    import driver

    trees = {"closure": args.tree_0271, "up": args.tree_0280, "new": args.tree_new}
    if tree not in pythons_of(args):
        return driver._engine_env(dict(os.environ), tree, trees, args.site, args.run, cache)
    own = set(trees.values()) | {args.site}
    for path in trees.values():
        listed = Path(path) / ".pythonpath"
        if listed.is_file():
            own.update(listed.read_text().strip().split(":"))
    env = dict(os.environ, VLLM_CACHE_ROOT=str(args.run / "vllm-cache" / cache))
    # A FlashInfer workspace per version, as driver._engine_env gives a tree.
    env.setdefault("FLASHINFER_WORKSPACE_BASE", driver.flashinfer_workspace(
        pythons_of(args)[tree], args.run / "flashinfer" / cache))
    rest = [p for p in env.pop("PYTHONPATH", "").split(":") if p and p not in own]
    if rest:
        env["PYTHONPATH"] = ":".join(rest)
    env.update(driver.NO_MULTICAST)
    return env


def run_pair(args, pair: list[str], deadline: float) -> int:
    """Both versions' engines of one kind on the GPU at once, started
    together, then each cell run by one and at once by the other, who goes
    first alternating from cell to cell and from cycle to cycle. A slow
    spell of a core lasts about a second, longer than a cell and shorter
    than a cycle of cells, so it falls on both figures of a pair whose main
    threads share that core (`--main-cpu`). The number of failed engines.

    Starting together halves a pair's start, which a cold compile cache
    makes minutes long: each engine's KV cache has a fixed size
    (`kv_cache_memory_bytes`), with which vLLM sizes nothing by the memory
    it finds free, so neither start is disturbed by the other's."""
    left = deadline - time.time()
    if left < args.min_engine_s:
        print(f"[round {args.round} {','.join(pair)}] skipped: {left:.0f} s of the time limit left",
              flush=True)
        return len(pair)
    engines = [Engine(args, name, deadline, paired=True,
                      partner=next(n for n in pair if n != name)) for name in pair]
    # Each start is waited for even when the other's failed: a start that
    # ends leaves its compile cache warm for the next round.
    ready = [engine.ask(None, deadline - EXIT_MARGIN) == "ready" for engine in engines]
    cycles, longest = 0, 0.0
    kept = EXIT_MARGIN + (2 * HOST_PROFILE_S if args.host_profile else 0.0)
    # The first engine up idled while the other started: one more
    # unrecorded cycle each, so that neither meets the measurement cold.
    if all(ready) and all(engine.ask("warm", deadline) == "done" for engine in engines):
        while cycles < engine_reps(pair[0], args.reps):
            if time.time() + 1.2 * longest + kept > deadline:
                break
            t = time.time()
            # all() stops at the first engine that does not answer.
            if not all(engine.ask(f"cell {cell} {position}", deadline) == "done"
                       for i, cell in enumerate(args.cells)
                       for engine, position in zip(
                           engines if (cycles + i) % 2 == 0 else engines[::-1], POSITIONS)):
                break
            cycles, longest = cycles + 1, max(longest, time.time() - t)
            # Each cycle's figures are copied out at once: a run killed at
            # its time limit keeps every cycle but the one it cut.
            copy_run(args.run, args.copy_to)
        if args.host_profile:
            # Each alone in turn; the other waits idle.
            for engine in engines:
                if engine.ask("host-profile", deadline) != "done":
                    break
    print(f"[round {args.round} {','.join(pair)}] {cycles} paired cycles", flush=True)
    return sum(engine.finish() for engine in engines)


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
    run.add_argument("--time-limit", type=float, default=540.0,
                     help="seconds this command may spend on engines, as you "
                          "choose; each stops "
                          "repeating in time to save, and one that would start "
                          "with less than --min-engine-s left is skipped")
    run.add_argument("--min-engine-s", type=float, default=MIN_ENGINE_S)
    run.add_argument("--reps", type=int, default=None,
                     help=f"timed cycles of every engine (default: {REPS})")
    run.add_argument("--warmups", type=int, default=WARMUPS)
    run.add_argument("--cells", type=parse_cells, default=",".join(CELLS),
                     help="comma-separated cells this round times (default: all); "
                          "a round that adds repetitions to the cells whose "
                          "intervals are still wide")
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
    run.add_argument("--main-cpu", type=int,
                     help="after its warm-up, each engine's main thread (where vLLM "
                          "schedules, drafts and launches) is pinned to this core, "
                          "the same for every engine; its other threads keep theirs")
    run.add_argument("--torch-threads", type=int,
                     help="OMP_NUM_THREADS for every engine, so that both versions "
                          "run torch's CPU work on as many threads")
    run.add_argument("--pending", action="store_true",
                     help="run only the round's engines (its order, or --engines) "
                          "without a result that exited 0: a round run in several "
                          "goes on where the last one stopped")
    run.add_argument("--tree-0271", default="/tmp/vt")
    run.add_argument("--tree-0280", default="/tmp/vt28")
    run.add_argument("--tree-new", default="/tmp/vtnew",
                     help="the newest upstream release (new_ engines), run when a "
                          "vllm-*.dist-info/METADATA lies beside its vllm/")
    run.add_argument("--site", default="/tmp/site")
    run.add_argument("--python-0271",
                     help="run the 0.27.1 engines in this interpreter, a venv with 0.27.1 "
                          "installed and patched, instead of --tree-0271 on PYTHONPATH")
    run.add_argument("--python-0280", help="the same for the up_ engines (0.28.0)")
    run.add_argument("--python-new", help="the same for the new_ engines (the newest "
                     "release; its version is the venv's vLLM's)")
    run.add_argument("--attention-backend", default=ATTENTION_BACKEND,
                     help=f"every engine's attention backend, target and draft "
                          f"(default {ATTENTION_BACKEND}); '{AUTO}' leaves it to vLLM")
    rep = sub.add_parser("report", help="tables and verdicts from every round")
    rep.add_argument("--run", type=Path, required=True)
    rep.add_argument("--copy-to", type=Path)
    rep.add_argument("--order-unbalanced", action="store_true",
                     help="judge each pair of cycles on its own, as reports did before "
                          "pairs were order-balanced (the tables published before)")
    summ = sub.add_parser("summary", help="summary.md: the run's facts and verdicts")
    summ.add_argument("--run", type=Path, required=True)
    summ.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 where summary.md is not what the "
                           "result files make")
    plans = sub.add_parser("plan", help="print each engine's arguments and the round order")
    plans.add_argument("--tree-new", default="/tmp/vtnew")
    plans.add_argument("--attention-backend", default=ATTENTION_BACKEND)
    engine = sub.add_parser("engine", help=argparse.SUPPRESS)
    engine.add_argument("--name", required=True, choices=sorted(ENGINES))
    engine.add_argument("--round", type=int, required=True)
    engine.add_argument("--models", required=True)
    engine.add_argument("--result", required=True)
    engine.add_argument("--reps", type=int, required=True)
    engine.add_argument("--warmups", type=int, default=WARMUPS)
    engine.add_argument("--cells", type=parse_cells, default=",".join(CELLS))
    engine.add_argument("--stop-at", type=float, required=True)
    engine.add_argument("--profile", action="store_true")
    engine.add_argument("--reply-fd", type=int)
    engine.add_argument("--host-profile", action="store_true")
    engine.add_argument("--main-cpu", type=int)
    engine.add_argument("--vllm-version")
    engine.add_argument("--attention-backend", default=ATTENTION_BACKEND)
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
        versions = run_versions(args)
        rounds = (1, 2) if len(versions) == 2 else range(1, 2 * len(versions) + 1)
        print(json.dumps({"order": {n: round_order(n, tuple(versions)) for n in rounds},
                          "engines": {n: engine_kwargs(n, paths, args.attention_backend)
                                      for n in ENGINES if ENGINES[n][0] in versions}},
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
    if args.command == "summary":
        return summary(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
