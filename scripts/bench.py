"""Wall time of `check` and `apply` on the real vLLM 0.27.1 tree, against a floor.

The floor is a bare Python process that imports libcst and parses the seven
target files: the least any structural tool has to do. Each command runs as
the installed console script would, in a fresh process, several times; the
median counts. `apply` runs on a fresh pristine copy every time.

    make bench            # or: .venv/bin/python scripts/bench.py --runs 7
"""

from __future__ import annotations

import argparse
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
TARGETS_CHECK = {"check": 1.5, "apply": 2.0}


def timed(command: list[str], expect: int) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True)
    elapsed = time.perf_counter() - start
    if result.returncode != expect:
        sys.exit(f"{command} exited {result.returncode}:\n{result.stdout.decode()}{result.stderr.decode()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tool = [sys.executable, "-m", "dflash2_backport"]
    with tempfile.TemporaryDirectory() as scratch:
        pristine = make_site("0.27.1", Path(scratch) / "pristine")
        files = [str(pristine / t) for t in TARGETS]
        floor, check, apply = [], [], []
        for run in range(args.runs):
            floor.append(timed([sys.executable, "-c", FLOOR, *files], 0))
            check.append(timed([*tool, "check", "--site-packages", str(pristine)], 1))
            site = Path(scratch) / f"apply-{run}"
            shutil.copytree(pristine, site)
            apply.append(timed([*tool, "apply", "--site-packages", str(site)], 0))
        patched = Path(scratch) / f"apply-0"
        check_done = [
            timed([*tool, "check", "--site-packages", str(patched)], 0)
            for _ in range(args.runs)
        ]
    base = statistics.median(floor)
    print(f"vLLM 0.27.1, seven target files, median of {args.runs} runs")
    print(f"  floor (import libcst + parse)   {base:6.3f} s")
    rows = [
        ("check (pristine, exit 1)", check, "check"),
        ("check (patched, exit 0)", check_done, "check"),
        ("apply (pristine -> patched)", apply, "apply"),
    ]
    ok = True
    for label, samples, kind in rows:
        ratio = statistics.median(samples) / base
        within = ratio <= TARGETS_CHECK[kind]
        ok &= within
        print(
            f"  {label:<31} {statistics.median(samples):6.3f} s  {ratio:4.2f}x floor  "
            f"(target {TARGETS_CHECK[kind]}x: {'met' if within else 'missed'})"
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
