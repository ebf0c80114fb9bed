"""A speed run's report: each cell's medians, speedups and ratios of
speedups (0.27.1's over each upstream version's) with their intervals and
verdicts, per-process figures, the host profiles side by side; and the
archive a run hands back."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import speed_stats
from speed_plan import ATTENTION_BACKEND, CELLS, LOADS, VERSIONS

TIMING_PATTERNS = {
    "load_s": r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds",
    "compile_s": r"torch\.compile (?:and initial profiling/warmup run together )?"
                 r"took ([\d.]+) s in total",
    "capture_s": r"Graph capturing finished in ([\d.]+) secs",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
}
ARCHIVE = "speed-run.tgz"
# What vLLM's log says of the attention backend it took: the one named
# ("Using AttentionBackendEnum.X backend."), the one it chose ("Using X
# attention backend out of potential backends"), and FlashAttention's version.
BACKEND_PATTERN = r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]*) (?:attention )?backend\b"
FA_VERSION_PATTERN = r"Using FlashAttention version (\d+)"
# The upstream versions 0.27.1 is compared with: an engine prefix, the key
# of its ratio in a cell's summary (0.28.0's as it always was).
UPSTREAMS = (("up_", "ratio"), ("new_", "ratio_new"))


def engine_timings(log: str) -> dict:
    """vLLM's own start-up figures from an engine's log, summed where the
    target and the draft each report one."""
    found = {}
    for key, pattern in TIMING_PATTERNS.items():
        values = [float(v) for v in re.findall(pattern, log)]
        if values:
            found[key] = round(sum(values), 1)
    return found


def attention_seen(log: str) -> list[str]:
    """The attention backends an engine's log says it used, each once, in
    the order met, and FlashAttention's version as FA2 or FA3."""
    found = re.findall(BACKEND_PATTERN, log)
    found += [f"FA{v}" for v in re.findall(FA_VERSION_PATTERN, log)]
    return list(dict.fromkeys(found))


def backend_of(result: dict) -> str:
    """The attention backend an engine was asked for; results from before
    the choice existed ran Triton's."""
    return result.get("attention_backend") or ATTENTION_BACKEND


def copy_run(run: Path, target: Path | None) -> None:
    """Everything a run has so far (results, logs, report), as one archive
    in `target`: one file to copy off the host, and a run cut short
    leaves the last complete one."""
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
            + main_core_part(host or {})
            + cycle_line(figures.get("cycles", []))
            + (f"; attention {', '.join(figures['attention_seen'])} in its log"
               if figures.get("attention_seen") else ""))


def main_core_part(host: dict) -> str:
    if "main_cpu" not in host:
        return ""
    alone, threads = host.get("threads_on_main_cpu", ["?", "?"])
    return (f", main thread on core {','.join(map(str, host['main_cpu']))} "
            f"({alone} of {threads} threads there alone)")


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


def load_results(run: Path) -> dict:
    """engine -> round -> its result file's contents."""
    found: dict[str, dict[int, dict]] = {}
    for path in sorted((run / "results").glob("round*-*.json")):
        data = json.loads(path.read_text())
        if "engine" in data:
            found.setdefault(data["engine"], {})[int(data["round"])] = data
    return found


def cell_of(result: dict, cell: str) -> dict:
    """One cell's figures in an engine's result; empty where it has none."""
    return result.get("cells", {}).get(cell, {})


def reps_by_round(results: dict, engine: str, cell: str) -> dict[int, list[float]]:
    """Round -> an engine's repetitions of one cell, rounds in order, those
    that did not time the cell left out."""
    return {n: cell_of(r, cell)["reps"] for n, r in sorted(results.get(engine, {}).items())
            if cell_of(r, cell).get("reps")}


def cell_rounds(results: dict, engine: str, cell: str) -> list[list[float]]:
    return list(reps_by_round(results, engine, cell).values())


def ratio_by_round(results: dict, cell: str, prefix: str = "up_") -> dict[int, float]:
    """The ratio of speedups from each round's own medians, for every round
    both DFlash2 engines ran (0.27.1's and the upstream version's of
    `prefix`); a round without its no-speculation engines takes their
    medians over all rounds."""
    def medians(engine):
        return {n: float(np.median(reps))
                for n, reps in reps_by_round(results, engine, cell).items()}

    ours, theirs = medians("dflash2"), medians(f"{prefix}dflash2")
    ours_base, up_base = medians("base"), medians(f"{prefix}base")
    if not (ours_base and up_base):
        return {}
    pooled = {"ours": speed_stats.pooled_median(cell_rounds(results, "base", cell)),
              "up": speed_stats.pooled_median(cell_rounds(results, f"{prefix}base", cell))}
    found = {}
    for n in sorted(set(ours) & set(theirs)):
        both = n in ours_base and n in up_base
        base_ratio = (ours_base[n] / up_base[n]) if both else pooled["ours"] / pooled["up"]
        found[n] = ours[n] / theirs[n] / base_ratio
    return found


def partnered(results: dict, engine: str, other: str) -> dict[int, dict]:
    """An engine's rounds, less those it ran paired with another engine
    than `other`: 0.27.1's engines, paired with 0.28.0's in some rounds and
    with the newest release's in others, meet each in rounds of their own.
    Results from before a pair named its partner count for any."""
    return {n: r for n, r in results.get(engine, {}).items()
            if not r.get("paired") or r.get("partner", other) == other}


def pair_rounds(results: dict, ours: str, up: str, cell: str,
                balanced: bool = True) -> dict[int, list[float]] | None:
    """Round -> ours / up's of the round's pairs of cycles run back to back,
    order-balanced (`balance_order`) unless `balanced` is off, when every
    round of both engines (but those paired with a third) ran paired and
    gave pairs; else None, and the report judges the rounds unpaired."""
    mine, theirs = partnered(results, ours, up), partnered(results, up, ours)
    if not mine or set(mine) != set(theirs) or not all(
            r.get("paired") for r in (*mine.values(), *theirs.values())):
        return None
    found = {}
    for n in sorted(mine):
        a, b = (cell_of(r[n], cell) for r in (mine, theirs))
        pairs = [x / y for x, y in zip(a.get("reps", []), b.get("reps", []))]
        if balanced:
            pairs = balance_order(pairs, a.get("order", []))
        if pairs:
            found[n] = pairs
    return found or None


def balance_order(pairs: list[float], order: list[str]) -> list[float]:
    """A round's pairs (ours / up's), each pair where ours ran first coupled
    with the next where it ran second: the geometric mean of the two. Who
    goes first flips from cycle to cycle, and on a GPU where the first of a
    pair runs some percent faster or slower than the second, the pairs fall
    in two clusters around the true ratio; their median is unstable and the
    bootstrap's interval spans both clusters. In a couple the effect of the
    order cancels (as in any crossover design), whatever its size, and the
    noise stays. A pair left without a partner (a round cut short) is
    dropped; a round that recorded no order keeps its pairs as they are."""
    if len(order) != len(pairs):
        return pairs
    first = [p for p, position in zip(pairs, order) if position == "first"]
    second = [p for p, position in zip(pairs, order) if position == "second"]
    return [float(np.sqrt(a * b)) for a, b in zip(first, second)]


def pair_order(results: dict, cell: str, prefix: str = "up_") -> dict | None:
    """How the DFlash2 pairs of a paired run depend on who ran first: the
    median of ours / upstream's when ours ran first and when it ran second
    (the order alternates, so an effect of it cancels in the ratio but
    widens its interval), and how the two figures of a pair correlate (a
    spell both meet correlates them; near 0, pairing cancels little)."""
    ours = partnered(results, "dflash2", f"{prefix}dflash2")
    theirs = partnered(results, f"{prefix}dflash2", "dflash2")
    ratios: dict[str, list[float]] = {"first": [], "second": []}
    logs = []
    for n in sorted(set(ours) & set(theirs)):
        mine, up = (cell_of(r[n], cell) for r in (ours, theirs))
        for a, b, position in zip(mine.get("reps", []), up.get("reps", []),
                                  mine.get("order", [])):
            ratios[position].append(a / b)
            logs.append((np.log(a), np.log(b)))
    if not (ratios["first"] and ratios["second"]):
        return None
    a, b = np.asarray(logs).T
    correlation = float(np.corrcoef(a, b)[0, 1]) if np.ptp(a) and np.ptp(b) else float("nan")
    return {"ours_first": float(np.median(ratios["first"])),
            "ours_second": float(np.median(ratios["second"])),
            "pairs": [len(ratios["first"]), len(ratios["second"])],
            "correlation": correlation}


def acceptance_length(results: dict, engine: str, cell: str) -> float | None:
    drafts = accepted = 0.0
    for r in results.get(engine, {}).values():
        for counters in cell_of(r, cell).get("counters", []):
            drafts += counters.get("num_drafts", 0.0)
            accepted += counters.get("num_accepted_tokens", 0.0)
    return 1 + accepted / drafts if drafts else None


def newest_label(results: dict) -> str | None:
    """The newest upstream release's version, as its engines recorded it;
    None when the run has none."""
    found = sorted({r.get("version") or "newest" for engine in ("new_base", "new_dflash2")
                    for r in results.get(engine, {}).values()})
    if len(found) > 1:
        raise SystemExit(f"the new_ engines ran on more than one version ({found}): "
                         f"report each from a run directory of its own")
    return found[0] if found else None


def version_prefixes(results: dict) -> list[tuple[str, str]]:
    """(version, engine prefix) of every version in the run: 0.27.1 and
    0.28.0 always, the newest upstream when its engines ran."""
    found = [(VERSIONS["closure"], ""), (VERSIONS["up"], "up_")]
    newest = newest_label(results)
    return found + [(newest, "new_")] if newest else found


def summarize(results: dict, balanced: bool = True) -> dict:
    """Per cell: each version's medians, speedup, acceptance, and the ratio
    of 0.27.1's speedup to each upstream version's with its verdict (0.28.0's
    under "ratio", the newest release's under "ratio_new"), its pairs
    order-balanced unless `balanced` is off; cells without data are left
    out."""
    summary = {}
    versions = version_prefixes(results)
    for cell in CELLS:
        rows, rounds = {}, {}
        for version, prefix in versions:
            base = cell_rounds(results, f"{prefix}base", cell)
            spec = cell_rounds(results, f"{prefix}dflash2", cell)
            rounds[prefix] = (base, spec)
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
        labels = {prefix: version for version, prefix in versions}
        for prefix, key in UPSTREAMS:
            if prefix not in labels:
                continue
            ratio = cell_ratio(results, cell, prefix, rounds[""], rounds[prefix], balanced)
            if ratio is not None:
                if prefix != "up_":
                    ratio["version"] = labels[prefix]
                entry[key] = ratio
        summary[cell] = entry
    return summary


def cell_ratio(results: dict, cell: str, prefix: str, ours: tuple, theirs: tuple,
               balanced: bool = True) -> dict | None:
    """0.27.1's speedup over the upstream version's of `prefix` in one cell,
    judged: within the pairs when every round of both versions ran paired,
    else from each engine's rounds; None when an engine has no figures."""
    base_pairs = pair_rounds(results, "base", f"{prefix}base", cell, balanced)
    spec_pairs = pair_rounds(results, "dflash2", f"{prefix}dflash2", cell, balanced)
    if base_pairs and spec_pairs:
        ratio = speed_stats.paired_ratio_of_speedups(
            list(base_pairs.values()), list(spec_pairs.values()))
        pooled = speed_stats.pooled_median(list(base_pairs.values()))
        ratio["balanced"] = balanced
        ratio["by_round"] = {
            n: float(np.median(pairs)) / (float(np.median(base_pairs[n]))
                                          if base_pairs.get(n) else pooled)
            for n, pairs in spec_pairs.items()}
        order = pair_order(results, cell, prefix)
        if order:
            ratio["order"] = order
        return ratio
    if all(ours) and all(theirs):
        ratio = speed_stats.ratio_of_speedups(*ours, *theirs)
        ratio["by_round"] = ratio_by_round(results, cell, prefix)
        return ratio
    return None


def _ci(interval: dict | None, digits: int = 0) -> str:
    if interval is None:
        return "-"
    return (f"{interval['point']:.{digits}f} [{interval['lo']:.{digits}f}, "
            f"{interval['hi']:.{digits}f}]")


def profile_key(function: str) -> str:
    """A profiled function's name as both versions share it: without its
    line (the trees differ there) and without the address a built-in's
    name carries (each process has its own)."""
    return re.sub(r" at 0x[0-9a-f]+", "", re.sub(r":\d+\(", "(", function))


def host_profile_lines(results: dict, rows: int = 12) -> list[str]:
    """Per round both DFlash2 engines profiled their host side (0.27.1's and
    an upstream version's): the functions whose own time per output token
    differs most between the versions (matched by file and name: their
    lines differ)."""
    lines = []
    for version, prefix in version_prefixes(results)[1:]:
        lines += _host_profile_lines(results, prefix, version, rows)
    return lines


def _host_profile_lines(results: dict, prefix: str, version: str, rows: int) -> list[str]:
    lines = []
    ours, theirs = results.get("dflash2", {}), results.get(f"{prefix}dflash2", {})
    for n in sorted(set(ours) & set(theirs)):
        profiles = [r[n].get("host_profile") for r in (ours, theirs)]
        if not all(profiles):
            continue
        per_token = []
        for profile in profiles:
            # Functions that differ only by their line (two lambdas of one
            # file) are summed under their shared name.
            own: dict[str, float] = {}
            for f in profile["functions"]:
                key = profile_key(f["function"])
                own[key] = own.get(key, 0.0) + 1e6 * f["own_s"] / profile["tokens"]
            per_token.append(own)
        total = [1e6 * p["elapsed_s"] / p["tokens"] for p in profiles]
        lines.append(f"host profile, round {n}, us of own time per output token under "
                     f"cProfile (0.27.1 / {version}; all: {total[0]:.0f} / {total[1]:.0f}):")
        names = sorted(set(per_token[0]) | set(per_token[1]),
                       key=lambda f: (-abs(per_token[0].get(f, 0.0) - per_token[1].get(f, 0.0)),
                                      f))
        for name in names[:rows]:
            mine, up = (f"{t[name]:.1f}" if name in t else "-" for t in per_token)
            lines.append(f"  {mine:>8} / {up:>8}  {name}")
    return lines


def backend_line(results: dict) -> str:
    """The report's header: the attention backend the engines were asked
    for, one for the run (a run directory holds one), and what vLLM's logs
    said it used."""
    asked: dict[str, list[str]] = {}
    seen: list[str] = []
    for engine, rounds in sorted(results.items()):
        for n, r in sorted(rounds.items()):
            asked.setdefault(backend_of(r), []).append(f"{engine} round {n}")
            seen += r.get("attention_seen", [])
    if len(asked) > 1:
        return ("attention backend: MIXED, the figures compare unlike engines: "
                + "; ".join(f"{backend}: {', '.join(engines)}"
                            for backend, engines in sorted(asked.items())))
    backend = next(iter(asked), ATTENTION_BACKEND)
    return (f"attention backend: {'auto (vLLM chooses)' if backend == 'auto' else backend}"
            + (f"; vLLM's logs: {', '.join(dict.fromkeys(seen))}" if seen else ""))


def ratio_lines(ratio: dict, version: str) -> list[str]:
    paired = ""
    if ratio.get("paired"):
        paired = " (cycles paired, order balanced)" if ratio["balanced"] else " (cycles paired)"
    lines = [f"speedup ratio 0.27.1 / {version}{paired}: {_ci(ratio, 3)} "
             f"(+-{100 * ratio['half_width']:.1f}%): {ratio['verdict']}"]
    if ratio.get("by_round"):
        lines.append("  each round's own: " + ", ".join(
            f"round {n} {value:.3f}" for n, value in ratio["by_round"].items()))
    order = ratio.get("order")
    if order:
        lines.append(
            f"  DFlash2 pairs, ours / {version}'s: {order['ours_first']:.3f} with ours "
            f"first, {order['ours_second']:.3f} with ours second "
            f"({order['pairs'][0]} and {order['pairs'][1]} pairs); "
            f"the two figures of a pair correlate {order['correlation']:.2f}")
    return lines


def format_report(summary: dict, header: str | None = None) -> str:
    lines = [header] if header else []
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
            lines += ratio_lines(ratio, VERSIONS["up"])
        else:
            lines.append("speedup ratio: both versions' base and DFlash2 figures needed")
        newest = [version for version in entry["rows"]
                  if version not in (VERSIONS["closure"], VERSIONS["up"])]
        if entry.get("ratio_new"):
            lines += ratio_lines(entry["ratio_new"], entry["ratio_new"]["version"])
        elif newest:
            lines.append(f"speedup ratio 0.27.1 / {newest[0]}: both versions' base and "
                         f"DFlash2 figures needed")
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
    summary = summarize(results, balanced=not args.order_unbalanced)
    text = format_report(summary, backend_line(results))
    timing = [f"round {n} {engine}: {timing_line(r)}"
              for engine, rounds in sorted(results.items())
              for n, r in sorted(rounds.items())]
    text = text + "\n\nper process:\n" + "\n".join(timing)
    compared = host_profile_lines(results)
    if compared:
        text += "\n\n" + "\n".join(compared)
    print(text)
    made = format_summary(args.run, results)
    for target in (args.run, args.copy_to):
        if target is not None:
            target.mkdir(parents=True, exist_ok=True)
            (target / "report.txt").write_text(text + "\n")
            (target / "report.json").write_text(json.dumps(summary, indent=1))
            (target / SUMMARY).write_text(made)
    copy_run(args.run, args.copy_to)
    verdicts = [e[key]["verdict"] for e in summary.values() for _, key in UPSTREAMS
                if key in e]
    return 0 if verdicts and all(v == "PASS" for v in verdicts) else 1


# -- summary.md: a run's facts and verdicts, made from its files alone ------

SUMMARY = "summary.md"
# What a run's engines record of where they ran (speed_engine.py), and
# where a run made before they did keeps it: the run's own run.json.
ENVIRONMENT = (("date", "date"), ("gpu", "GPU"), ("torch", "torch"))
RUN_FACTS = "run.json"


def _facts(results: dict, run: Path, key: str) -> str:
    found = sorted({str(r[key]) for rounds in results.values() for r in rounds.values()
                    if r.get(key)})
    if not found and (run / RUN_FACTS).is_file():
        kept = json.loads((run / RUN_FACTS).read_text()).get(key)
        found = [str(kept)] if kept else []
    return ", ".join(found) or "not recorded"


def _install(result: dict) -> str:
    """How an engine's vLLM was installed, from where it was imported."""
    where = result.get("vllm_file") or ""
    return "installed by pip" if "site-packages" in where else "a source tree on PYTHONPATH"


def _versions_line(results: dict) -> list[str]:
    lines = []
    for version, prefix in version_prefixes(results):
        engines = [r for name in (f"{prefix}base", f"{prefix}dflash2")
                   for r in results.get(name, {}).values()]
        if not engines:
            continue
        seen = sorted({r.get("vllm_version") or version for r in engines})
        role = "patched by this tool" if prefix == "" else "upstream"
        installs = ", ".join(sorted({_install(r) for r in engines}))
        lines.append(f"- vLLM {', '.join(seen)} ({role}; {installs})")
    return lines


def _configuration(results: dict) -> list[str]:
    every = [r for rounds in results.values() for r in rounds.values()]
    rounds = sorted({int(r["round"]) for r in every})
    paired = all(r.get("paired") for r in every)
    cores = sorted({c for r in every for c in (r.get("host") or {}).get("main_cpu") or []})
    sampler = sorted({str(r.get("flashinfer_sampler_env")) for r in every})
    lines = [f"- rounds: {', '.join(map(str, rounds))}; engines "
             + ("paired (both versions on the GPU at once, taking turns cell by cell)"
                if paired else "one at a time"),
             f"- cells: {', '.join(CELLS)} (regime high or low acceptance, load c1: one "
             f"request at a time, b32: 32 at once)"]
    if cores:
        lines.append(f"- main threads pinned to core {', '.join(map(str, cores))}")
    if sampler != ["None"]:
        lines.append(f"- VLLM_USE_FLASHINFER_SAMPLER={', '.join(sampler)}")
    return lines


def _ratio_cell(ratio: dict | None) -> str:
    if ratio is None:
        return "-"
    return f"{_ci(ratio, 3)} (±{100 * ratio['half_width']:.1f}%) {ratio['verdict']}"


def format_summary(run: Path, results: dict) -> str:
    """summary.md for the run in `run`: every fact read from its result
    files (and, for what a run's engines did not yet record, its run.json);
    the verdicts are the report's, order-balanced, with the pair-by-pair
    judgement beside them."""
    balanced = summarize(results, balanced=True)
    unbalanced = summarize(results, balanced=False)
    lines = [f"# Speed run `{run.resolve().name}`", "",
             "Made by `scripts/gpu/speed.py summary --run` (or `report --run`) from this "
             "directory's `results/`; do not edit.", ""]
    lines += [f"- {label}: {_facts(results, run, key)}" for key, label in ENVIRONMENT]
    lines += _versions_line(results)
    lines.append(f"- {backend_line(results)}")
    lines += _configuration(results)
    lines.append("")
    for prefix, key in UPSTREAMS:
        if not any(key in entry for entry in balanced.values()):
            continue
        version = VERSIONS["up"] if prefix == "up_" else next(
            e[key]["version"] for e in balanced.values() if key in e)
        lines += [f"## 0.27.1's DFlash2 speedup over {version}'s", "",
                  f"| cell | 0.27.1 speedup | {version} speedup | ratio, order balanced "
                  f"(the verdict) | ratio, pair by pair |",
                  "|---|---|---|---|---|"]
        for cell, entry in balanced.items():
            if key not in entry:
                continue
            ours, theirs = entry["rows"].get(VERSIONS["closure"], {}), entry["rows"].get(
                version, {})
            lines.append(
                f"| {cell} | {_ci(ours.get('speedup'), 3)} | {_ci(theirs.get('speedup'), 3)} "
                f"| {_ratio_cell(entry[key])} | {_ratio_cell(unbalanced[cell].get(key))} |")
        verdicts = [entry[key]["verdict"] for entry in balanced.values() if key in entry]
        passed = sum(v == "PASS" for v in verdicts)
        lines += ["", f"{passed} of {len(verdicts)} cells pass against {version}.", ""]
    lines.append(f"A cell passes when the ratio's 95% interval is within "
                 f"±{100 * speed_stats.MAX_HALF_WIDTH:.0f}% and its lower end above "
                 f"{speed_stats.FLOOR}; it is inconclusive when wider, or from fewer than "
                 f"{speed_stats.MIN_ROUNDS} rounds. `speed.py report --run` on this "
                 f"directory prints the full tables.")
    return "\n".join(lines) + "\n"


def summary(args) -> int:
    """Write the run's summary.md, or with --check say whether the one there
    is what its files make (exit 1 where it is not)."""
    made = format_summary(args.run, load_results(args.run))
    path = args.run / SUMMARY
    if getattr(args, "check", False):
        if not path.is_file() or path.read_text() != made:
            print(f"{path}: not what {args.run}/results makes; run `speed.py summary "
                  f"--run {args.run}`")
            return 1
        print(f"{path}: up to date")
        return 0
    path.write_text(made)
    print(f"wrote {path}")
    return 0
