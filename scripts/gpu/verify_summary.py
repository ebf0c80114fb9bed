"""The summary of `verify --gpu` runs on a real install: what each step
(verify_real_install.sh) printed, judged, and where its engines' start went.

    python3 scripts/gpu/verify_summary.py RUN_DIR

RUN_DIR holds `results/` as verify_real_install.sh and real_install_setup.sh
left them (verify-STEP.txt, verify-STEP-phases.txt, verify-STEP-engine-NAME.json,
machine.txt); the summary goes to RUN_DIR/summary.md, generated, never edited.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

STEPS = ("cold", "warm", "float32", "broken", "pristine")
# What each step must show: the patched install passes; a broken selector and
# the pristine tree fail.
EXPECTED = {"cold": 0, "warm": 0, "float32": 0, "broken": 2, "pristine": 2}
WHAT = {
    "cold": "no options, FlashInfer's kernels not yet built",
    "warm": "no options, FlashInfer's kernels already built",
    "float32": "`--dtype float32`",
    "broken": "no options, the selector's candidate ids flipped in their lowest bit",
    "pristine": "no options, after `revert`",
}
CHECK = re.compile(r"^  (pass|FAIL)  (\w+) +(.*) \((\d+(?:\.\d+)?) s\)$")
EXIT = re.compile(r"^exit (\d+), wall (\d+(?:\.\d+)?) s$")
ATTENTION = re.compile(r"attention: (target .*?, draft .*?\))(?: \(|$)")
CONTEXT = re.compile(r"^on (.*?), (\w+): ")
VLLM = re.compile(r"^vLLM (\S+) at ")
CLOCK = re.compile(r"^(\S+)  (\d\d):(\d\d):(\d\d) (.*)$")
INIT = re.compile(r"init engine .* took (\d+(?:\.\d+)?) s \(compilation: (\d+(?:\.\d+)?) s\)")
GRAPHS = re.compile(r"Graph capturing finished in (\d+) secs")


@dataclass
class Check:
    verdict: str
    name: str
    detail: str
    seconds: float


@dataclass
class Step:
    name: str
    release: str = "?"
    gpu: str = "?"
    dtype: str = "?"
    checks: list[Check] = field(default_factory=list)
    verdict: str = ""
    exit: int | None = None
    wall: float | None = None

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)


def read_step(name: str, text: str) -> Step:
    step = Step(name)
    for line in text.splitlines():
        if match := VLLM.match(line):
            step.release = match[1]
        elif match := CONTEXT.match(line):
            step.gpu, step.dtype = match[1], match[2]
        elif match := CHECK.match(line):
            step.checks.append(Check(match[1], match[2], match[3], float(match[4])))
        elif line.startswith(("verified:", "failed:")):
            step.verdict = line
        elif match := EXIT.match(line):
            step.exit, step.wall = int(match[1]), float(match[2])
    return step


@dataclass
class EngineStart:
    engine: str
    first: int  # seconds of the day of its first timed line
    last: int
    init: float | None = None
    compilation: float | None = None
    graphs: int | None = None


def read_phases(text: str) -> list[EngineStart]:
    """Per engine log: the clock span of its timed lines and what vLLM says
    its start took (profile, KV cache, warm-up; compilation within it)."""
    engines: dict[str, EngineStart] = {}
    for line in text.splitlines():
        match = CLOCK.match(line)
        if not match:
            continue
        name, rest = match[1], match[5]
        clock = int(match[2]) * 3600 + int(match[3]) * 60 + int(match[4])
        engine = engines.setdefault(name, EngineStart(name, clock, clock))
        engine.first, engine.last = min(engine.first, clock), max(engine.last, clock)
        if init := INIT.search(rest):
            # A draft engine's start also reports its own compile ranges; the
            # line vLLM ends the start with carries the totals.
            engine.init, engine.compilation = float(init[1]), float(init[2])
        if graphs := GRAPHS.search(rest):
            engine.graphs = (engine.graphs or 0) + int(graphs[1])
    return list(engines.values())


# An engine's own record (gpu_probes.run_engine): the seconds of each phase.
ENGINE_PHASES = ("import", "start", "introspect", "attention", "greedy", "kernels")


def read_engine_records(results: Path, step: str) -> dict[str, dict]:
    """engine -> the seconds of its phases, from each record the step kept."""
    records = {}
    for path in sorted(results.glob(f"verify-{step}-engine-*.json")):
        engine = path.stem.removeprefix(f"verify-{step}-engine-")
        records[engine] = json.loads(path.read_text()).get("seconds", {})
    return records


def cell(value: object) -> str:
    return "" if value is None else str(value)


def summary(run: Path) -> str:
    results = run / "results"
    steps = [
        read_step(name, (results / f"verify-{name}.txt").read_text())
        for name in STEPS
        if (results / f"verify-{name}.txt").exists()
    ]
    lines = [
        f"# `verify --gpu` on a real install: `{run.name}`",
        "",
        "Made by `scripts/gpu/verify_summary.py` from this directory's `results/`; do not edit.",
        "",
    ]
    if steps:
        first = steps[0]
        lines += [f"- vLLM {first.release}, {first.gpu}", ""]
    lines += [
        "| step | what | dtype | exit (expected) | wall s | engine start s | checks | attention |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for step in steps:
        engine = step.check("engine")
        passed = sum(c.verdict == "pass" for c in step.checks)
        attention = ATTENTION.search(engine.detail) if engine else None
        lines.append(
            f"| {step.name} | {WHAT[step.name]} | {step.dtype} "
            f"| {cell(step.exit)} ({EXPECTED[step.name]}) | {cell(step.wall)} "
            f"| {cell(engine.seconds if engine else None)} "
            f"| {passed} of {len(step.checks)} pass | {attention[1] if attention else ''} |"
        )
    wrong = [s.name for s in steps if s.exit != EXPECTED[s.name]]
    lines += [
        "",
        f"{len(steps) - len(wrong)} of {len(steps)} steps end as expected"
        + (f"; not: {', '.join(wrong)}." if wrong else "."),
        "",
        "## What each step judged",
        "",
    ]
    for step in steps:
        lines.append(f"- **{step.name}**: {step.verdict}")
        for check in step.checks:
            if check.name in ("lossless", "counters") or check.verdict == "FAIL":
                lines.append(f"  - {check.verdict} {check.name}: {check.detail}")
    lines += [
        "",
        "## Where the engines' start goes",
        "",
        "From each engine's log: the span of its timed lines, and vLLM's own"
        " figures for its start (profile, KV cache, warm-up) and the"
        " torch.compile and CUDA-graph capture within it.",
        "",
        "| step | engine | logged span s | start s | compilation s | graph capture s |",
        "|---|---|---|---|---|---|",
    ]
    for step in steps:
        phases = results / f"verify-{step.name}-phases.txt"
        if not phases.exists():
            continue
        for engine in read_phases(phases.read_text()):
            lines.append(
                f"| {step.name} | {engine.engine} | {engine.last - engine.first} "
                f"| {cell(engine.init)} | {cell(engine.compilation)} | {cell(engine.graphs)} |"
            )
    timed = [(step, read_engine_records(results, step.name)) for step in steps]
    timed = [(step, records) for step, records in timed if records]
    if timed:
        lines += [
            "",
            "Each engine's own record: the seconds of its phases, `import` (vLLM"
            " imported in the engine's process), `start` (the engine built:"
            " configuration, model, compilation, profile, KV cache, CUDA graphs)"
            " and `greedy` (the 24 prompts generated); the wall time of the step"
            " less the engines' is the tool's and the probe's own start.",
            "",
            "| step | engine | " + " | ".join(f"{p} s" for p in ENGINE_PHASES) + " |",
            "|---|---|" + "---|" * len(ENGINE_PHASES),
        ]
        for step, records in timed:
            for engine, seconds in records.items():
                lines.append(f"| {step.name} | {engine} | "
                             + " | ".join(cell(seconds.get(p)) for p in ENGINE_PHASES) + " |")
    return "\n".join(lines) + "\n"


def main(run: Path) -> None:
    (run / "summary.md").write_text(summary(run))
    print(run / "summary.md")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
