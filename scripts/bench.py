"""Wall time of `check` and `apply` on the real vLLM 0.27.1 tree, against a
floor, for this checkout and for an earlier commit measured in the same run.

The floor is a bare Python process that imports libcst and parses the
files the edits target: the least any libcst-based tool has to do. Each command runs in
a fresh process of the console script, several times; the median
counts, and each figure is a ratio to the floor measured in the same run, so
a loaded machine skews them less; CPU time (the command's and its workers')
is shown beside wall time, as load moves it least. The runs alternate between the two tools.
`apply` runs on a fresh pristine copy every time. `check` is timed cold (an
empty verdict cache), warm (the same files checked before) and as a
pre-commit hook sees a fork: a patched source tree checked before, then a
commit that changes one of those files.

Both tools are installed as a user installs them, each into a venv of its
own under $DFLASH2_BACKPORT_TEST_CACHE/bench: the earlier commit (--before, by
default the last one before the edits were reshaped) exported with `git
archive`, this checkout copied as it is (a venv per content, reused).

    make bench            # or: .venv/bin/python scripts/bench.py --runs 7

Then the start-up cost of typer: a warm `check` of a patched tree, in venvs
that hold this checkout with typer 0.28.0 and with the newest typer pip
picks (0.29 and later import pydantic to parse options), each as the console
script runs it (the plain command line, which skips typer's parser:
cli.main._plain_call) and through typer's parser. `--only typer` runs this part
alone.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from tests.trees import TARGETS, make_site  # noqa: E402
from tests.wheels import CACHE  # noqa: E402

FLOOR = (
    "import sys, libcst\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'rb') as f:\n"
    "        libcst.parse_module(f.read())\n"
)
#: The largest of the target files, and the one a fork changes most often.
COMMITTED = "vllm/config/vllm.py"
#: Goals for this checkout, as ratios to the floor.
TARGET_RATIO = {
    "check cold, pristine": 0.4,
    "check cold, patched": 0.4,
    "check warm, patched": 0.25,
    "check pre-commit, one file": 0.3,
    "apply": 1.2,
}
#: The last commit before the edits were reshaped into folders and typer was
#: left to the lines that need it.
BEFORE = "6cae55a"


def timed(command: list[str], expect: int, cache: Path) -> tuple[float, float]:
    """Wall time, and CPU time (the command's and its workers'), in seconds."""
    # The earlier tool read the cache's place under its former name: without
    # it, its "cold" runs would be warm ones from the user's home.
    environment = dict(
        os.environ,
        DFLASH2_BACKPORT_VERDICT_CACHE=str(cache),
        DFLASH2_BACKPORT_CACHE_DIR=str(cache),
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Run from a neutral directory: `-m` and a checkout in the working
    # directory would shadow the installed tool.
    result = subprocess.run(
        command, capture_output=True, env=environment, cwd=tempfile.gettempdir()
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != expect:
        sys.exit(
            f"{' '.join(command)} exited {result.returncode}, expected {expect}:\n"
            f"{result.stdout.decode()}{result.stderr.decode()}"
        )
    return elapsed, cpu


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], check=True, capture_output=True).stdout


def _install(home: Path, fill: Callable[[Path], None]) -> Path:
    """A venv at `home` with the tool installed as a user installs it (not
    editable, no test tools beside it): the same start-up cost for both."""
    python = home / "venv" / "bin" / "python"
    if not python.exists():
        shutil.rmtree(home, ignore_errors=True)
        source = home / "source"
        source.mkdir(parents=True)
        fill(source)
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             str(source)],
            check=True,
            cwd=home,
        )
    return python


def at_commit(revision: str) -> Path:
    """The tool at `revision`, exported with `git archive`; its venv's python."""
    commit = _git("rev-parse", "--short", revision).decode().strip()

    def fill(source: Path) -> None:
        subprocess.run(["tar", "-x", "-C", str(source)], input=_git("archive", commit), check=True)

    return _install(CACHE / "bench" / f"tool-{commit}", fill)


def this_checkout() -> Path:
    """The working tree's tool (tracked and untracked files, not ignored
    ones); its venv's python, reused while the files are the same."""
    listed = sorted(
        _git("ls-files", "--cached", "--others", "--exclude-standard").decode().splitlines()
    )
    files = [name for name in listed if (REPOSITORY / name).is_file()]
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (REPOSITORY / name).read_bytes())

    def fill(source: Path) -> None:
        for name in files:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / name, source / name)

    home = CACHE / "bench" / f"checkout-{digest.hexdigest()[:12]}"
    for stale in home.parent.glob("checkout-*"):
        if stale != home:
            shutil.rmtree(stale, ignore_errors=True)
    return _install(home, fill)


#: typer before it parsed options with pydantic; the other venv takes the
#: newest typer pip picks.
OLD_TYPER = "0.28.0"
THROUGH_TYPER = (
    "import sys; sys.argv[0] = 'dflash2-backport'\n"
    "from dflash2_backport.cli.main import app\n"
    "app(prog_name='dflash2-backport')\n"
)


def typer_venvs(checkout: Path) -> dict[str, Path]:
    """typer version -> the python of a venv holding this checkout's tool and
    that typer: the checkout's own venv (the newest typer) and a copy of it
    with OLD_TYPER."""
    pythons = {}
    old = checkout.parent.parent.with_name(f"{checkout.parent.parent.name}-typer-{OLD_TYPER}")
    if not (old / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(old)], check=True)
        source = checkout.parent.parent.parent / "source"
        subprocess.run(
            [str(old / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", str(source), f"typer=={OLD_TYPER}"],
            check=True, cwd=old,
        )
    for python in (checkout, old / "bin" / "python"):
        version = subprocess.run(
            [str(python), "-c", "from importlib.metadata import version; print(version('typer'))"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        pythons[version] = python
    return pythons


def typer_startup(checkout: Path, runs: int) -> None:
    """Print a warm `check`'s wall time per typer version, both ways."""
    pythons = typer_venvs(checkout)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        site = make_site("0.27.1", scratch / "site")
        cache = scratch / "warm"
        tool = [str(checkout.with_name("dflash2-backport"))]
        timed([*tool, "apply", "--site-packages", str(site)], 0, cache)
        ways = {}
        for version, python in pythons.items():
            ways[f"typer {version}, console script"] = [str(python.with_name("dflash2-backport"))]
            ways[f"typer {version}, through typer"] = [str(python), "-c", THROUGH_TYPER]
        for command in ways.values():
            timed([*command, "check", "--site-packages", str(site)], 0, cache)
        samples: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(runs):
            for name, command in ways.items():
                wall, _ = timed([*command, "check", "--site-packages", str(site)], 0, cache)
                samples[name].append(wall)
    print(f"check warm, patched: the tool's start-up by typer; median of {runs} fresh processes")
    for name, walls in samples.items():
        print(f"  {name:<40} {statistics.median(walls):6.3f} s wall")


def measure(
    tool: list[str], pristine: Path, scratch: Path, run: int, fork: Path
) -> dict[str, tuple[float, float]]:
    """One sample of each command for one tool."""
    samples = {}
    cold = scratch / f"cold-{run}"
    samples["check cold, pristine"] = timed(
        [*tool, "check", "--site-packages", str(pristine)], 1, cold / "a"
    )
    site = scratch / f"apply-{run}"
    shutil.copytree(pristine, site)
    samples["apply"] = timed([*tool, "apply", "--site-packages", str(site)], 0, cold / "b")
    samples["check cold, patched"] = timed(
        [*tool, "check", "--site-packages", str(site)], 0, cold / "c"
    )
    warm = scratch / "warm-cache"
    timed([*tool, "check", "--site-packages", str(site)], 0, warm)
    samples["check warm, patched"] = timed(
        [*tool, "check", "--site-packages", str(site)], 0, warm
    )
    # The hook ran on the previous commit; this one changes one file.
    hook = scratch / "hook-cache"
    check_fork = [*tool, "check", "--root", str(fork)]
    timed(check_fork, 0, hook)
    with (fork / COMMITTED).open("a") as committed:
        committed.write(f"\n\ndef _changed_by_commit_{run}():\n    return {run}\n")
    samples["check pre-commit, one file"] = timed(check_fork, 0, hook)
    shutil.rmtree(site)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with")
    parser.add_argument("--only", choices=["typer"], help="run only this part")
    args = parser.parse_args()
    if args.only == "typer":
        typer_startup(this_checkout(), args.runs)
        return
    pythons = {f"before ({args.before})": at_commit(args.before), "this checkout": this_checkout()}
    tools = {name: [str(python.with_name("dflash2-backport"))] for name, python in pythons.items()}
    # The floor runs on this checkout's venv: the same Python and libcst.
    floor_python = str(pythons["this checkout"])
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {label: [] for label in TARGET_RATIO} for name in tools
    }
    floors: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        pristine = make_site("0.27.1", scratch / "pristine")
        files = [str(pristine / t) for t in TARGETS]
        forks = {}
        for index, (name, tool) in enumerate(tools.items()):
            forks[name] = scratch / f"fork-{index}"
            shutil.copytree(pristine, forks[name])
            timed([*tool, "apply", "--root", str(forks[name])], 0, scratch / f"fork-cache-{index}")
        for run in range(args.runs):
            floors.append(timed([floor_python, "-c", FLOOR, *files], 0, scratch / "floor"))
            # Alternate which tool goes first, so neither always runs warmer.
            order = list(tools.items())[:: 1 if run % 2 == 0 else -1]
            for name, tool in order:
                place = scratch / f"{run}-{list(tools).index(name)}"
                place.mkdir()
                for label, value in measure(tool, pristine, place, run, forks[name]).items():
                    samples[name][label].append(value)
    floor = statistics.median(wall for wall, _ in floors)
    floor_cpu = statistics.median(cpu for _, cpu in floors)
    before, after = tools
    print(f"vLLM 0.27.1, the {len(TARGETS)} target files; median of {args.runs} fresh processes each")
    print(f"  {'floor: import libcst + parse':<28} {floor:6.3f} s wall, {floor_cpu:6.3f} s CPU")
    print(f"  {'':<28} {before:>26} {after:>26}   target (wall)")
    print(f"  {'':<28} {'wall':>19} {'CPU':>6} {'wall':>19} {'CPU':>6}")
    met = True
    for label, target in TARGET_RATIO.items():
        cells = []
        for name in tools:
            wall = statistics.median(w for w, _ in samples[name][label])
            cpu = statistics.median(c for _, c in samples[name][label])
            cells.append(f"{wall:6.3f} s {wall / floor:5.2f}x {cpu / floor_cpu:5.2f}x")
        ratio = statistics.median(w for w, _ in samples[after][label]) / floor
        met &= ratio <= target
        verdict = "met" if ratio <= target else "missed"
        print(f"  {label:<28} {cells[0]:>26} {cells[1]:>26}   {target}x {verdict}")
    # A report, not a test: the machine's load moves these figures.
    print("all targets met" if met else "some targets missed")
    print()
    typer_startup(pythons["this checkout"], args.runs)


if __name__ == "__main__":
    main()
