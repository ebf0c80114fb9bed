"""Wall time of `dflash2-backport verify` (CPU) on the runtime test venvs.

The venvs are the ones the runtime tests build as users build theirs
(tests/runtime/env.py): vLLM 0.27.1 and 0.27.0 patched by the tool, on
torch's CPU build, and 0.27.1 on its CUDA build with no GPU. Each run is the
tool's console script with --python, in a fresh process, as a user types it;
the median of several counts against a goal well above the time
docs/development.md gives.

    make bench-verify      # or: .venv/bin/python scripts/bench_verify.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.runtime import env as runtime_env  # noqa: E402

TOOL = Path(sys.executable).with_name("dflash2-backport")
# 9 to 14 s in docs/development.md on a two-core machine; a run over a minute is a
# regression whatever the load.
GOAL_S = 60.0
CASES = [("cpu", v) for v in runtime_env.VLLM_VERSIONS] + [
    ("cuda", v) for v in runtime_env.CUDA_VLLM_VERSIONS
]


def once(python: Path) -> float:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("VLLM_", "PYTHON", "VIRTUAL_ENV", "CUDA_"))}
    with tempfile.TemporaryDirectory() as scratch:
        environ["TMPDIR"] = scratch
        started = time.monotonic()
        done = subprocess.run([str(TOOL), "verify", "--python", str(python)],
                              capture_output=True, text=True, env=environ,
                              stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"verify failed on {python}:\n{done.stdout}{done.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ok = True
    print(f"{'torch':6} {'vLLM':7} {'median s':>9}  runs")
    for torch, version in CASES:
        python = runtime_env.venv_python(runtime_env.patched_env(version, torch))
        once(python)  # the first interpreter after a build compiles bytecode
        runs = [once(python) for _ in range(args.runs)]
        median = statistics.median(runs)
        ok &= median < GOAL_S
        print(f"{torch:6} {version:7} {median:9.1f}  "
              f"[{' '.join(f'{r:.1f}' for r in runs)}]", flush=True)
    print(f"{'PASS' if ok else 'FAIL'}: every median under {GOAL_S:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
