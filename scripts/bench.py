"""Wall time of `check` and `apply` on the real vLLM 0.27.1 tree, against a floor.

The floor is a bare Python process that imports libcst and parses the seven
target files: the least any libcst-based tool has to do. Each command runs in
a fresh process, as the console script would, several times; the median
counts, and each figure is a ratio to the floor measured in the same run, so
a loaded machine skews them less. `apply` runs on a fresh pristine copy every
time. `check` is timed cold (empty verdict cache), warm (the same files
checked before) and as a pre-commit hook sees a fork: a patched source tree
checked before, then a commit that changes one of the seven files.

    make bench            # or: .venv/bin/python scripts/bench.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.trees import TARGETS, make_site  # noqa: E402

FLOOR = (
    "import sys, libcst\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'rb') as f:\n"
    "        libcst.parse_module(f.read())\n"
)
#: The largest of the seven files, and the one a fork changes most often.
COMMITTED = "vllm/config/vllm.py"
# Goals, as ratios to the floor.
TARGET_RATIO = {
    "check cold, pristine": 1.0,
    "check cold, patched": 1.0,
    "check warm, patched": 0.25,
    "check pre-commit, one file": 0.6,
    "apply": 1.5,
}


def timed(command: list[str], expect: int, cache: Path) -> float:
    environment = dict(os.environ, DFLASH2_BACKPORT_CACHE_DIR=str(cache))
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, env=environment)
    elapsed = time.perf_counter() - start
    if result.returncode != expect:
        sys.exit(
            f"{' '.join(command)} exited {result.returncode}, expected {expect}:\n"
            f"{result.stdout.decode()}{result.stderr.decode()}"
        )
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tool = [sys.executable, "-m", "dflash2_backport"]
    samples: dict[str, list[float]] = {"floor": [], **{k: [] for k in TARGET_RATIO}}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        pristine = make_site("0.27.1", scratch / "pristine")
        files = [str(pristine / t) for t in TARGETS]
        warm = scratch / "warm-cache"
        fork = scratch / "fork"
        shutil.copytree(pristine, fork)
        timed([*tool, "apply", "--root", str(fork)], 0, scratch / "fork-cache")
        for run in range(args.runs):
            cold = scratch / f"cold-{run}"
            samples["floor"].append(timed([sys.executable, "-c", FLOOR, *files], 0, cold))
            samples["check cold, pristine"].append(
                timed([*tool, "check", "--site-packages", str(pristine)], 1, cold / "a")
            )
            site = scratch / f"apply-{run}"
            shutil.copytree(pristine, site)
            samples["apply"].append(
                timed([*tool, "apply", "--site-packages", str(site)], 0, cold / "b")
            )
            samples["check cold, patched"].append(
                timed([*tool, "check", "--site-packages", str(site)], 0, cold / "c")
            )
            timed([*tool, "check", "--site-packages", str(site)], 0, warm)
            samples["check warm, patched"].append(
                timed([*tool, "check", "--site-packages", str(site)], 0, warm)
            )
            # The hook ran on the previous commit; this one changes one file.
            hook = scratch / "hook-cache"
            check_fork = [*tool, "check", "--root", str(fork)]
            timed(check_fork, 0, hook)
            with (fork / COMMITTED).open("a") as committed:
                committed.write(f"\n\ndef _changed_by_commit_{run}():\n    return {run}\n")
            samples["check pre-commit, one file"].append(timed(check_fork, 0, hook))
    floor = statistics.median(samples.pop("floor"))
    print(f"vLLM 0.27.1, the seven target files; median of {args.runs} runs")
    print(f"  {'floor: import libcst + parse':<30} {floor:6.3f} s")
    met = True
    for label, values in samples.items():
        ratio = statistics.median(values) / floor
        within = ratio <= TARGET_RATIO[label]
        met &= within
        print(
            f"  {label:<30} {statistics.median(values):6.3f} s  {ratio:4.2f}x floor"
            f"  (target {TARGET_RATIO[label]}x: {'met' if within else 'missed'})"
        )
    # A report, not a test: the machine's load moves these figures.
    print("all targets met" if met else "some targets missed")


if __name__ == "__main__":
    main()
