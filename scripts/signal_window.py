"""How early a Ctrl-C still gets the one-line stop, not a traceback.

`dflash2-backport apply --site-packages SITE` is started from its console
script, installed as a user installs it, and sent SIGINT a fixed delay after
the start; each outcome is counted per delay. The machine is kept busy by
as many spinning processes as it has cores (`--load`), as it is when a job
launcher starts many ranks at once. An earlier commit (`--before`) is
measured in the same run, the delays interleaved, so both see the same load.

    .venv/bin/python scripts/signal_window.py                # 10 runs per delay
    .venv/bin/python scripts/signal_window.py --before HEAD~1 --runs 20

Outcomes: `one line` (exit 2, the tool's own message), `tb, tool` (a
KeyboardInterrupt traceback through a module of the tool: a signal the tool
should have caught), `tb, start` (one raised before any line of the tool
ran: the interpreter's start-up, the console script's `import re`, the
import system finding the package), `killed` (the
interpreter died of the signal before Python had its own handler: no
output), `finished` (the command was done before the signal came), `other`.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY / "scripts"))
sys.path.insert(0, str(REPOSITORY))

from bench import at_commit, this_checkout  # noqa: E402
from tests.trees import make_site  # noqa: E402

#: The first traceback through the tool's own modules, per tool.
CAUGHT_LATE: dict[str, str] = {}
DELAYS = (0.05, 0.1, 0.15, 0.2, 0.3)
OUTCOMES = ("one line", "tb, tool", "tb, start", "killed", "finished", "other")
ONE_LINE = "dflash2-backport: interrupted by SIGINT; nothing was written"


def _before_the_tool(stderr: str) -> bool:
    """Whether a traceback was raised before any line of the tool ran: in
    the interpreter's start-up (no frame of the console script's own), at
    the script's `import re`, or while the import system finds the tool's
    package (no frame in any of the tool's files)."""
    if "/dflash2_backport/" in stderr:
        return False
    lines = stderr.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames or "/bin/dflash2-backport" not in lines[frames[0]]:
        return True
    return lines[frames[0] + 1].strip() in {"import re",
                                            "from dflash2_backport.__main__ import main"}


def outcome(code: int, stdout: str, stderr: str) -> str:
    if "Traceback" in stdout + stderr:
        return "tb, start" if _before_the_tool(stderr) else "tb, tool"
    if code == 2 and stderr.strip() == ONE_LINE:
        return "one line"
    if code == -signal.SIGINT and not (stdout + stderr).strip():
        return "killed"
    if code == 0:
        return "finished"
    return "other"


def interrupted_once(tool: Path, site: Path, delay: float, cache: Path) -> str:
    environment = dict(os.environ, DFLASH2_BACKPORT_VERDICT_CACHE=str(cache))
    run = subprocess.Popen(
        [str(tool), "apply", "--site-packages", str(site)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment, cwd=tempfile.gettempdir(),
    )
    time.sleep(delay)
    run.send_signal(signal.SIGINT)
    stdout, stderr = run.communicate(timeout=120)
    seen = outcome(run.returncode, stdout, stderr)
    if seen == "tb, tool":
        CAUGHT_LATE.setdefault(str(tool), stderr)
    if seen == "finished":
        # The next run must find the same pristine tree.
        subprocess.run([str(tool), "revert", "--site-packages", str(site)],
                       check=True, capture_output=True, env=environment)
    return seen


def spinners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def table(counts: dict[str, dict[float, collections.Counter]], runs: int) -> str:
    lines = [f"SIGINT after start, {runs} runs per cell: count of each outcome", ""]
    header = f"{'tool':<10} {'delay s':>7}  " + "  ".join(f"{o:>9}" for o in OUTCOMES)
    lines += [header, "-" * len(header)]
    for label, per_delay in counts.items():
        for delay, seen in per_delay.items():
            cells = "  ".join(f"{seen[o]:>9}" for o in OUTCOMES)
            lines.append(f"{label:<10} {delay:>7.2f}  {cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD", help="the earlier commit to measure beside")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1,
                        help="spinning processes kept running meanwhile")
    parser.add_argument("--delays", type=lambda v: tuple(map(float, v.split(","))),
                        default=DELAYS, help="seconds after the start, comma-separated")
    options = parser.parse_args()
    # A shell's background job starts with SIGINT ignored, and an ignored
    # signal stays ignored across exec: the commands would then finish as
    # if never signalled. Give them the default disposition users have.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tools = {
        "before": at_commit(options.before).with_name("dflash2-backport"),
        "this": this_checkout().with_name("dflash2-backport"),
    }
    counts = {label: {d: collections.Counter() for d in options.delays}
              for label in tools}
    with tempfile.TemporaryDirectory(prefix="signal-window-") as scratch:
        site = make_site("0.27.1", Path(scratch) / "site")
        busy = spinners(options.load)
        try:
            for _ in range(options.runs):
                for delay in options.delays:
                    for label, tool in tools.items():
                        seen = interrupted_once(tool, site, delay, Path(scratch) / "cache")
                        counts[label][delay][seen] += 1
        finally:
            for spinner in busy:
                spinner.kill()
                spinner.wait()
    print(table(counts, options.runs))
    for label, tool in tools.items():
        if str(tool) in CAUGHT_LATE:
            print(f"\n{label}: the first traceback through the tool\n{CAUGHT_LATE[str(tool)]}")


if __name__ == "__main__":
    main()
