"""Writes that survive SIGKILL, signals, concurrent runs and concurrent edits.

Every test here drives the tool as real subprocesses on a real vLLM 0.27.1
tree, and judges the tree with its own independent reading of it (Python's
`ast` and the bytes of a reference run), never with the tool's verdicts.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.faults import (
    EVERY_WRITE,
    KILL,
    TORN,
    append_to,
    install_hook,
    run_tool,
    served_runs,
    signal_self,
    start_tool,
)
from tests.forked_kills import ForkedKills
from tests.trees import INSTALLED, TARGETS, make_site, snapshot

pytestmark = [pytest.mark.wheels, pytest.mark.faults]


@pytest.fixture(scope="module", autouse=True)
def _runs_forked_from_one_server():
    """Every run here is a process of its own, forked from one that has
    imported the tool (tool_server.py), but for the runs about the imports."""
    with served_runs():
        yield

REGISTRY, DISPATCH, CONFIG, SPECULATIVE = (
    "vllm/model_executor/models/registry.py",
    "vllm/v1/worker/gpu/spec_decode/__init__.py",
    "vllm/config/vllm.py",
    "vllm/config/speculative.py",
)
#: Fix code in one file that calls fix code in another: (caller's file, the
#: name it calls, the file that must define it).
FIX_CALLS = [(CONFIG, "draft_shares_target_positions", SPECULATIVE)]
SEAM_NAMES = {
    "vllm/model_executor/models/qwen3_dflash.py": "decoder_layer_cls",
    "vllm/model_executor/layers/logits_processor.py": "get_top_k_tokens",
    "vllm/v1/worker/gpu/sample/gumbel.py": "gumbel_noised_argmax",
    "vllm/v1/worker/gpu/spec_decode/speculator.py": "draft_logits_spec",
}
TOOL_FILES = (".dflash2-backport-new", ".dflash2-backport-intent.json", ".dflash2-backport.lock")


# -- an independent reading of the tree ------------------------------------------


def _names(path: Path) -> frozenset[str]:
    """Every name defined, assigned, referenced or used as a string in a file."""
    return _read(path.read_bytes())[0]


@functools.lru_cache(maxsize=None)
def _read(data: bytes) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The names a file's source uses (`_names`), the attributes it reads
    and the functions it defines. A sweep meets each file in two or three
    states thousands of times: each is read once."""
    names, attributes, functions = set(), set(), set()
    for node in ast.walk(ast.parse(data)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
            attributes.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        if isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    return frozenset(names), frozenset(attributes), frozenset(functions)


def broken(site: Path, pristine: dict, applied: dict, only_pr: dict | None = None) -> list[str]:
    """What makes `site` unsafe for vLLM right now: a torn file, a switch
    leading to DFlash2 without the seams and modules it needs, or a fix
    calling a fix that is not there (`only_pr`: the bytes `apply --only-pr`
    writes, a third state every file may be in)."""
    problems = []
    for relative in TARGETS:
        data = (site / relative).read_bytes()
        states = [pristine[relative], applied[relative]]
        if only_pr is not None:
            states.append(only_pr[relative])
        if data not in states:
            problems.append(f"{relative}: neither 0.27.1's nor the patched bytes")
    for caller, name, definer in FIX_CALLS:
        calls = name in _read((site / caller).read_bytes())[1]
        defines = name in _read((site / definer).read_bytes())[2]
        if calls and not defines:
            problems.append(f"{caller} calls {name}, which {definer} lacks")
    for relative in INSTALLED:
        path = site / relative
        if path.exists() and path.read_bytes() != applied[relative]:
            problems.append(f"{relative}: torn module")
    switches = {
        "registry entry": "DFlash2DraftModel" in _names(site / REGISTRY),
        "speculator dispatch": "DFlash2Speculator" in _names(site / DISPATCH),
        "V2 forcing": "_is_dflash2_draft" in _names(site / CONFIG),
    }
    missing = [r for r in INSTALLED if not (site / r).exists()] + [
        f"{r} without {name}" for r, name in SEAM_NAMES.items() if name not in _names(site / r)
    ]
    for switch, on in switches.items():
        if on and missing:
            problems.append(f"{switch} is on, but missing: {', '.join(missing)}")
    return problems


def leftovers(site: Path) -> list[str]:
    return sorted(
        str(p.relative_to(site)) for p in site.rglob(".*") if p.name.endswith(TOOL_FILES)
    )


@pytest.fixture(scope="session")
def reference_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The bytes of a reference apply, and of a reference `apply --only-pr`
    after it, on 0.27.1: the same for every test, so made once."""
    scratch = tmp_path_factory.mktemp("reference")
    reference = make_site("0.27.1", scratch / "reference")
    # Its own verdict cache: session fixtures start before the per-test one.
    env = {k: v for k, v in os.environ.items() if k != "DFLASH2_BACKPORT_CACHE_DIR"}
    env["DFLASH2_BACKPORT_VERDICT_CACHE"] = str(scratch / "verdicts")
    assert run_tool(["apply", "--site-packages", str(reference)], env=env).returncode == 0
    applied = snapshot(reference)
    assert run_tool(["apply", "--only-pr", "--site-packages", str(reference)],
                    env=env).returncode == 0
    return {"applied": applied, "only_pr": snapshot(reference)}


@pytest.fixture
def trees(tmp_path: Path, reference_bytes: dict) -> dict:
    """A pristine 0.27.1 site-packages, and the bytes of a reference apply."""
    site = make_site("0.27.1", tmp_path / "site")
    pristine = snapshot(site)
    return {"site": site, "pristine": pristine, "applied": dict(reference_bytes["applied"]),
            "only_pr": dict(reference_bytes["only_pr"]), "hook": install_hook(tmp_path / "hook")}


def _restore(site: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(site, ignore_errors=True)
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)


# -- SIGKILL at every write ------------------------------------------------------------

#: (the command, the tree it starts from, the tree it leaves).
SWEEPS = [
    (["apply"], "pristine", "applied"),
    (["revert"], "applied", "pristine"),
    (["apply", "--only-pr"], "applied", "only_pr"),
    (["apply"], "only_pr", "applied"),
]
#: The commit's first act, after the lock, recovery and the plan: staging its record.
AFTER_THE_PLAN = ".dflash2-backport-intent.json.dflash2-backport-new"


def counted_calls(trees: dict, args: list[str], start: str, log: Path) -> list[tuple[int, str]]:
    """Every call of `args` that creates, fills, replaces or removes
    something in the tree, numbered as the fault hook counts them."""
    return [(at, operation) for at, operation, _ in _traced(trees, args, start, log)]


def _traced(trees: dict, args: list[str], start: str, log: Path) -> list[tuple[int, str, str]]:
    """`counted_calls`, each with the paths it names."""
    site = trees["site"]
    _restore(site, trees[start])
    log.unlink(missing_ok=True)
    traced = run_tool(args, hook=trees["hook"], root=site, act="", log=log, ops=EVERY_WRITE)
    assert traced.returncode == 0, traced.stderr
    return _calls_in(log)


def _calls_in(log: Path) -> list[tuple[int, str, str]]:
    return [
        (int(number), operation, " ".join(paths))
        for number, operation, *paths in (line.split(" ") for line in log.read_text().splitlines())
        if number != "-"
    ]


#: What a kill returns: how the run ended, and what it printed.
Killed = tuple[int, str]


def kills_on_every_core(
    tmp_path: Path,
    trees: dict,
    command: list[str],
    prepare: Callable[[Path], None],
    traced: list[tuple[int, str, str]],
    kills: list[tuple[int, str]],
    check: Callable[[Path, tuple[int, str], Killed], object],
) -> list:
    """`check(site, kill, how the killed run ended)` for every kill of
    `command` on a tree that `prepare(site)` sets up, whose calls a run of
    its own made as `traced`; the results that are not None.

    Each core works on a tree of its own, and has one run of `command`
    serve its kills from the plan on, forked (forked_kills.py); a kill at an
    earlier call is a run of its own. Every kill is of a real run of the
    tool, and every check runs real processes: only the run up to the
    plan, and the waiting, are shared. Before its kills, each core's run
    forks one child that is left alone: it must make the calls `traced`
    made from there on, one for one, and finish."""
    workers = max(1, min(len(kills), os.cpu_count() or 1))
    args = [*command, "--site-packages"]
    first = next(at for at, _, paths in traced if paths.endswith(AFTER_THE_PLAN))

    def share(worker: int) -> list:
        site = tmp_path / f"worker-{worker}" / "site"
        scratch = tmp_path / f"worker-{worker}" / "scratch"
        mine = kills[worker::workers]
        results = []
        prepare(site)
        with ForkedKills([*args, str(site)], site, trees["hook"], AFTER_THE_PLAN,
                         scratch) as server:
            assert server.first == first, (server.first, first)
            # Each child holds the lock the run took, as a run of its own would.
            assert str(site / "vllm" / ".dflash2-backport.lock") in server.held, server.held
            code, output = server.kill(len(traced) + 1, "", log=scratch / "alone.log")
            assert code == 0, output
            assert _as_compared(_calls_in(scratch / "alone.log"), site) == _as_compared(
                [call for call in traced if call[0] >= first], trees["site"]
            )
            results += [check(site, kill, server.kill(*kill)) for kill in mine
                        if kill[0] >= first]
        for at, act in [kill for kill in mine if kill[0] < first]:
            prepare(site)
            killed = run_tool([*args, str(site)], hook=trees["hook"], root=site, at=at,
                              act=act, ops=EVERY_WRITE)
            results.append(check(site, (at, act), (killed.returncode, killed.stderr)))
        return results

    with ThreadPoolExecutor(workers) as pool:
        shares = pool.map(share, range(workers))
        return [result for results in shares for result in results if result is not None]


def _as_compared(calls: list[tuple[int, str, str]], site: Path) -> list[tuple[int, str, str]]:
    """Calls made on another tree by another run: its paths relative, its nonce gone."""
    return [
        (at, operation, re.sub(r"\.[0-9a-f]{16}\.", ".NONCE.", paths.replace(f"{site}/", "")))
        for at, operation, paths in calls
    ]


def on_every_core(tmp_path: Path, items: list, check: Callable[[Path, object], object]) -> list:
    """`check(site, item)` for every item, each core working on a tree of its
    own; the results that are not None. Every item still runs real
    processes: only the waiting is shared."""
    workers = max(1, min(len(items), os.cpu_count() or 1))
    sites = [tmp_path / f"worker-{i}" / "site" for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        shares = pool.map(lambda i: [check(sites[i], item) for item in items[i::workers]],
                          range(workers))
        return [result for share in shares for result in share if result is not None]


@pytest.mark.parametrize("command, start, goal", SWEEPS,
                         ids=["apply", "revert", "apply --only-pr", "apply after --only-pr"])
def test_a_kill_at_any_write_torn_or_not_leaves_a_working_tree_and_the_next_run_finishes(
    trees: dict, command: list[str], start: str, goal: str, tmp_path: Path
) -> None:
    """Killed before each call that creates, fills, replaces or removes a
    file (the staged files' creation and writing included), and half-way
    through each write: the tree works as it stands, and the same command
    run again finishes the job, leaving nothing of the tool's behind."""
    traced = _traced(trees, [*command, "--site-packages", str(trees["site"])], start,
                     tmp_path / "calls.log")
    calls = [(at, operation) for at, operation, _ in traced]
    operations = {operation for _, operation in calls}
    assert {"create", "write", "replace"} <= operations, operations
    kills = [(at, KILL) for at, _ in calls] + [(at, TORN) for at, op in calls if op == "write"]

    def kill_then_finish(site: Path, kill: tuple[int, str], killed: Killed):
        at, act = kill
        code, output = killed
        if code != -signal.SIGKILL:
            return (at, "not killed", code, output.strip()[-300:])
        problems = broken(site, trees["pristine"], trees["applied"], trees["only_pr"])
        finished = run_tool([*command, "--site-packages", str(site)])
        if finished.returncode != 0 or problems or snapshot(site) != trees[goal] \
                or leftovers(site):
            return (at, "torn" if act == TORN else "kill", problems,
                    finished.stderr.strip()[-300:], leftovers(site))
        return None

    wrong = kills_on_every_core(
        tmp_path, trees, command, lambda site: _restore(site, trees[start]), traced, kills,
        kill_then_finish,
    )
    print(f"{command}: {len(wrong)} wrong of {len(kills)} kills")
    assert len(kills) >= 40
    assert wrong == []


def test_a_run_killed_while_it_finishes_a_killed_run_is_finished_by_the_next(
    trees: dict, tmp_path: Path
) -> None:
    """A double crash: `apply` killed half-way through writing a staged
    file, then the `apply` that finishes it killed in turn at each of its
    own writes, torn or not; a third `apply` leaves the patched tree."""
    site = trees["site"]
    first = next(
        at for at, op in counted_calls(trees, ["apply", "--site-packages", str(site)],
                                       "pristine", tmp_path / "a.log")
        if op == "write" and at > 6
    )

    def crash_once(site: Path) -> None:
        _restore(site, trees["pristine"])
        killed = run_tool(["apply", "--site-packages", str(site)], hook=trees["hook"],
                          root=site, at=first, act=TORN, ops=EVERY_WRITE)
        assert killed.returncode == -signal.SIGKILL, killed.stderr

    crash_once(site)
    log = tmp_path / "b.log"
    traced = run_tool(["apply", "--site-packages", str(site)], hook=trees["hook"], root=site,
                      act="", log=log, ops=EVERY_WRITE)
    assert traced.returncode == 0, traced.stderr
    calls = _calls_in(log)
    second = [at for at, operation, _ in calls if operation == "write"]

    def crash_again_then_finish(site: Path, kill: tuple[int, str], killed: Killed):
        at, _ = kill
        code, output = killed
        if code != -signal.SIGKILL:
            return (at, "not killed", code, output.strip()[-300:])
        problems = broken(site, trees["pristine"], trees["applied"])
        finished = run_tool(["apply", "--site-packages", str(site)])
        if finished.returncode != 0 or problems or snapshot(site) != trees["applied"] \
                or leftovers(site):
            return (at, problems, finished.stderr.strip()[-300:], leftovers(site))
        return None

    assert len(second) >= 10
    assert kills_on_every_core(
        tmp_path, trees, ["apply"], crash_once, calls, [(at, TORN) for at in second],
        crash_again_then_finish,
    ) == []


def test_an_interrupted_apply_only_pr_is_finished_by_a_plain_apply(trees: dict) -> None:
    """The record names the command, apply, not its edit set: the plan that
    writes what the record says finishes it, then `apply` does its own."""
    site = trees["site"]
    _restore(site, trees["applied"])
    killed = run_tool(
        ["apply", "--only-pr", "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=4, act=KILL,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert snapshot(site) not in (trees["applied"], trees["only_pr"])
    finished = run_tool(["apply", "--site-packages", str(site)])
    assert finished.returncode == 0, finished.stderr
    assert "finished an interrupted apply" in finished.stdout
    assert snapshot(site) == trees["applied"]
    assert leftovers(site) == []


def test_check_reports_an_interrupted_commit_and_writes_nothing(trees: dict) -> None:
    site = trees["site"]
    killed = run_tool(
        ["apply", "--site-packages", str(site)], hook=trees["hook"], root=site, at=6, act=KILL
    )
    assert killed.returncode == -signal.SIGKILL
    before = snapshot(site)
    check = run_tool(["check", "--site-packages", str(site), "--json"])
    assert check.returncode == 2
    document = json.loads(check.stdout)
    assert document["action"] == "error"
    assert "interrupted" in document["error"] and "dflash2-backport apply" in document["error"]
    assert snapshot(site) == before
    assert run_tool(["apply", "--site-packages", str(site)]).returncode == 0
    assert snapshot(site) == trees["applied"]


# -- signals ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_the_commit_lets_it_finish_then_exits_2_with_a_message(
    trees: dict, name: str
) -> None:
    site = trees["site"]
    result = run_tool(
        ["apply", "--site-packages", str(site), "--json"],
        hook=trees["hook"], root=site, at=7, act=signal_self(name),
    )
    assert result.returncode == 2, result.stderr
    document = json.loads(result.stdout)
    assert document["action"] == "interrupted"
    assert name in document["message"] and "finished" in document["message"]
    assert "Traceback" not in result.stderr
    assert snapshot(site) == trees["applied"]
    assert leftovers(site) == []


def test_ctrl_c_while_planning_writes_nothing_and_says_so(trees: dict) -> None:
    site = trees["site"]
    # Ctrl-C as the planner opens the registry to judge it: after the lock,
    # before any write.
    result = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=1, match=REGISTRY, ops="open",
        act=signal_self("SIGINT"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "interrupted by SIGINT; nothing was written" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(site) == trees["pristine"]
    assert leftovers(site) == []


#: From the tool's first module on: the package's helpers that install the
#: command's own handlers, the options' declarations (a plain line loads them
#: in typer's stead), then the command line itself.
LOADING = ["dflash2_backport.utils", "dflash2_backport.utils.interrupts",
           "dflash2_backport.cli.declared", "dflash2_backport.cli.main"]


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("module", LOADING)
@pytest.mark.parametrize("command", ["check", "apply", "revert"])
def test_a_signal_while_the_command_line_loads_stops_with_one_line_and_writes_nothing(
    trees: dict, command: str, module: str, name: str
) -> None:
    """The first tenth of a second goes to importing the tool: Ctrl-C there
    is a clean stop, as it is later, not a traceback, down to the first
    module the tool imports."""
    site = trees["site"]
    for as_json in (False, True):
        args = [command, "--site-packages", str(site), *(["--json"] if as_json else [])]
        result = run_tool(args, hook=trees["hook"], root=site, on_import=module,
                          act=signal_self(name))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr + result.stdout
        message = f"interrupted by {name}; nothing was written"
        if as_json:
            document = json.loads(result.stdout)
            assert (document["action"], document["message"]) == ("interrupted", message)
        else:
            assert result.stderr.strip().splitlines() == [f"dflash2-backport: {message}"]
    assert snapshot(site) == trees["pristine"]


#: Imported by each worker of the pool as it parses its first file, and
#: never by the command itself when two workers rewrite.
IN_A_WORKER = "libcst.native"


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_the_pool_rewrites_stops_once_it_is_done_and_writes_nothing(
    trees: dict, name: str
) -> None:
    """The signal reaches the command while its workers rewrite: raised into
    the executor's machinery there, it once left the command waiting forever
    for its workers."""
    site = trees["site"]
    result = run_tool(
        ["apply", "--site-packages", str(site)], timeout=60,
        hook=trees["hook"], root=site, on_import=IN_A_WORKER,
        act=f"os.kill(os.getppid(), signal.{name})",
        env=dict(os.environ, DFLASH2_BACKPORT_JOBS="2"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"dflash2-backport: interrupted by {name}; nothing was written"]
    assert snapshot(site) == trees["pristine"]
    assert leftovers(site) == []


def test_the_pool_dies_with_a_command_killed_by_sigkill_and_leaves_the_tree_unlocked(
    trees: dict
) -> None:
    """Killed while its workers rewrite (the OOM killer, `docker kill`), the
    command must leave no worker behind holding the tree's lock, which the
    workers inherited."""
    site = trees["site"]
    run = start_tool(["apply", "--site-packages", str(site)],
                     env=dict(os.environ, DFLASH2_BACKPORT_JOBS="2"))
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not workers and run.poll() is None and time.monotonic() < deadline:
            workers = _children(run.pid)
        assert workers, "the command ended before its pool started"
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(_alive(pid) for pid in workers)
        again = run_tool(["apply", "--site-packages", str(site)],
                         env=dict(os.environ, DFLASH2_BACKPORT_LOCK_TIMEOUT="5"))
        assert again.returncode == 0, again.stderr
        assert snapshot(site) == trees["applied"]
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    try:
        return [int(n) for n in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody has reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_verify_loads_what_finds_vllm_stops_with_one_line(
    trees: dict, name: str
) -> None:
    result = run_tool(["verify", "--python", sys.executable], hook=trees["hook"],
                      root=trees["site"], on_import="dflash2_backport.vllm_tree.triage",
                      act=signal_self(name))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"dflash2-backport: error: interrupted by {name}; nothing was written"]


# -- compare before replace --------------------------------------------------------


@pytest.mark.parametrize(
    "moment, match",
    [
        ("after planning, before staging", ".dflash2-backport-intent.json"),
        # Edited as the file before it in the commit is put in place: the
        # files already replaced are put back.
        ("half-way through the commit", "vllm/v1/worker/gpu/spec_decode/__init__.py"),
    ],
)
def test_a_file_edited_during_the_run_is_kept_and_nothing_is_written(
    trees: dict, moment: str, match: str
) -> None:
    site = trees["site"]
    edited = site / CONFIG
    result = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=1, match=match,
        act=append_to(edited, "# a user's edit\n"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "changed since it was read" in result.stderr and CONFIG in result.stderr
    expected = dict(trees["pristine"])
    expected[CONFIG] += b"# a user's edit\n"
    assert snapshot(site) == expected
    assert leftovers(site) == []


# -- concurrency -------------------------------------------------------------------


@pytest.mark.parametrize("mix", [("apply",) * 4, ("revert",) * 4, ("apply", "revert") * 2],
                         ids=["4 applies", "4 reverts", "2 applies and 2 reverts"])
def test_concurrent_runs_leave_the_tree_wholly_applied_or_wholly_pristine(
    trees: dict, mix: tuple[str, ...], tmp_path: Path
) -> None:
    pristine, applied = trees["pristine"], trees["applied"]
    same = len(set(mix)) == 1

    def race(site: Path, round_: int) -> None:
        # The same command on every rank starts where it has work to do; a
        # mix starts from either end in turn.
        start = pristine if (mix[0] == "apply" if same else round_ % 2 == 0) else applied
        _restore(site, start)
        processes = [start_tool([command, "--site-packages", str(site), "--json"])
                     for command in mix]
        outcomes = [(p.wait(timeout=300), *p.communicate()) for p in processes]
        for code, stdout, stderr in outcomes:
            assert code in ((0,) if same else (0, 2)), f"round {round_}: {stdout}{stderr}"
            assert "Traceback" not in stderr
            json.loads(stdout)
        state = snapshot(site)
        assert state in (pristine, applied), f"round {round_}: torn tree"
        assert leftovers(site) == []
        if same:
            # One writer; every other rank found nothing left to do.
            assert state == (applied if mix[0] == "apply" else pristine)
            actions = sorted(json.loads(stdout)["action"] for _, stdout, _ in outcomes)
            written = {"apply": "applied", "revert": "reverted"}[mix[0]]
            assert actions == sorted(["nothing-to-do"] * 3 + [written])

    # A round mostly waits: for the lock, and for the backoff after it.
    on_every_core(tmp_path, list(range(20)), race)


# -- owners, modes and what is not a plain file ------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand files to another user")
def test_root_keeps_every_path_owned_by_the_tree_owner(trees: dict) -> None:
    site = trees["site"]
    owner = (4242, 4343)
    for path in [site, *site.rglob("*")]:
        os.lchown(path, *owner)

    def owners() -> set:
        return {(p.stat().st_uid, p.stat().st_gid) for p in [site, *site.rglob("*")]}

    assert run_tool(["apply", "--site-packages", str(site)]).returncode == 0
    assert (site / INSTALLED[2]).exists()
    assert owners() == {owner}
    assert run_tool(["revert", "--site-packages", str(site)]).returncode == 0
    assert owners() == {owner}


def test_new_files_take_vllm_s_file_mode_and_new_directories_their_parent_s(trees: dict) -> None:
    site = trees["site"]
    (site / "vllm/__init__.py").chmod(0o640)
    (site / INSTALLED[1]).parent.parent.chmod(0o750)
    (site / REGISTRY).chmod(0o604)
    assert run_tool(["apply", "--site-packages", str(site)]).returncode == 0
    assert oct((site / INSTALLED[0]).stat().st_mode & 0o777) == oct(0o640)
    assert oct((site / INSTALLED[2]).stat().st_mode & 0o777) == oct(0o640)
    assert oct((site / INSTALLED[1]).parent.stat().st_mode & 0o777) == oct(0o750)
    assert oct((site / REGISTRY).stat().st_mode & 0o777) == oct(0o604)


def _make_link(site: Path, relative: str, tmp_path: Path) -> None:
    store = tmp_path / "store" / Path(relative).name
    store.parent.mkdir(exist_ok=True)
    shutil.move(site / relative, store)
    (site / relative).symlink_to(store)


def _make_fifo(site: Path, relative: str, tmp_path: Path) -> None:
    (site / relative).unlink()
    os.mkfifo(site / relative)


def _make_record_link(site: Path, _: str, tmp_path: Path) -> None:
    _make_link(site, "vllm-0.27.1.dist-info/RECORD", tmp_path)


def _make_vllm_link(site: Path, _: str, tmp_path: Path) -> None:
    shutil.move(site / "vllm", tmp_path / "shared-vllm")
    (site / "vllm").symlink_to(tmp_path / "shared-vllm")


def _make_directory_link(site: Path, relative: str, tmp_path: Path) -> None:
    shutil.move(site / relative, tmp_path / "shared-directory")
    (site / relative).symlink_to(tmp_path / "shared-directory")


@pytest.mark.parametrize("command", ["check", "apply"])
@pytest.mark.parametrize(
    "make, relative, expected, remedy",
    [
        (_make_link, REGISTRY, "is a symlink", "with a copy of the file"),
        (_make_link, "vllm/v1/worker/gpu/sample/gumbel.py", "is a symlink",
         "with a copy of the file"),
        (_make_fifo, CONFIG, "is a FIFO", "replace it with a regular file"),
        (_make_record_link, "vllm-0.27.1.dist-info/RECORD", "is a symlink",
         "with a copy of the file"),
        (_make_vllm_link, "vllm", "is a symlink", "with a copy of the directory"),
        (_make_directory_link, "vllm/v1/worker/gpu/sample", "is a symlink",
         "with a copy of the directory"),
    ],
    ids=["target link", "seam link", "target FIFO", "RECORD link", "vllm link",
         "directory link on the way"],
)
def test_what_is_not_a_plain_file_is_refused_by_name_and_nothing_written(
    trees: dict, tmp_path: Path, command: str, make, relative: str, expected: str,
    remedy: str,
) -> None:
    site = trees["site"]
    make(site, relative, tmp_path)
    before = snapshot(site)
    result = run_tool([command, "--site-packages", str(site), "--json"], timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    message = json.loads(result.stdout)["error"]
    assert f"{site / relative}: {expected}" in message
    assert remedy in message, message
    assert snapshot(site) == before
    assert leftovers(site) == []


# -- the lock ------------------------------------------------------------------------


def test_a_second_writer_waits_naming_the_holder_then_plans_again(trees: dict) -> None:
    from dflash2_backport.transaction.lock import TreeLock

    site = trees["site"]
    lock = TreeLock(site, "apply")
    lock.acquire(5, lambda _: None)
    waiter = start_tool(["apply", "--site-packages", str(site)])
    time.sleep(3)
    assert waiter.poll() is None  # still waiting
    lock.release()
    stdout, stderr = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, stderr
    assert f"waiting for pid {os.getpid()}" in stderr and "dflash2-backport apply" in stderr
    assert snapshot(site) == trees["applied"]


def test_a_writer_gives_up_after_the_timeout_and_writes_nothing(trees: dict) -> None:
    from dflash2_backport.transaction.lock import TreeLock

    site = trees["site"]
    with TreeLock(site, "revert") as lock:
        lock.acquire(5, lambda _: None)
        result = run_tool(
            ["apply", "--site-packages", str(site)],
            env={**os.environ, "DFLASH2_BACKPORT_LOCK_TIMEOUT": "1"},
        )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()[-1:]
    assert "gave up after 1 s" in line and f"pid {os.getpid()}" in line
    assert snapshot(site) == trees["pristine"]


def test_check_while_a_writer_holds_the_tree_says_who_and_writes_nothing(trees: dict) -> None:
    site = trees["site"]
    killed = run_tool(
        ["apply", "--site-packages", str(site)], hook=trees["hook"], root=site, at=6, act=KILL
    )
    assert killed.returncode == -signal.SIGKILL
    from dflash2_backport.transaction.lock import TreeLock

    with TreeLock(site, "apply") as lock:
        lock.acquire(5, lambda _: None)
        result = run_tool(["check", "--site-packages", str(site)])
    assert result.returncode == 2
    assert f"pid {os.getpid()}" in result.stderr and "is writing this tree now" in result.stderr


def _as_unprivileged(args: list[str]) -> subprocess.CompletedProcess:
    """Run the tool so that permission bits bind, even when the tests run as root."""
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop DAC capabilities")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "dflash2_backport", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize("stale_copy", [False, True],
                         ids=["", "with a stale copy of the record"])
@pytest.mark.parametrize("start", ["applied", "pristine"])
def test_a_read_only_tree_needs_no_lock_to_answer(
    trees: dict, start: str, stale_copy: bool
) -> None:
    site = trees["site"]
    _restore(site, trees[start])
    stale = site / "vllm/..dflash2-backport-intent.json.dflash2-backport-new"
    if stale_copy:
        # What a kill while the record was being written leaves; this user
        # may not remove it, and need not.
        stale.write_bytes(b'{\n "format": "dflash2-')
    directories = [p for p in [site, *site.rglob("*")] if p.is_dir()]
    for directory in directories:
        directory.chmod(0o555)
    try:
        result = _as_unprivileged(["apply", "--site-packages", str(site)])
    finally:
        for directory in directories:
            directory.chmod(0o755)
    if start == "applied":
        assert result.returncode == 0, result.stderr
        assert "nothing to do" in result.stdout
    else:
        assert result.returncode == 2
        assert "read-only; nothing was written" in result.stderr
    if stale_copy:
        stale.unlink()
    assert snapshot(site) == trees[start]


# -- recovery, held to what it promises ------------------------------------------------

RECORD = "vllm/.dflash2-backport-intent.json"


def _without_lock(site: Path) -> dict[str, bytes]:
    # A SIGKILL leaves the lock file behind; the next writer takes it over.
    return {k: v for k, v in snapshot(site).items() if not k.endswith(".dflash2-backport.lock")}


def _kill_as_it_replaces(trees: dict, relative: str, command: str = "apply") -> None:
    """Kill `command` right before it renames `relative` into place."""
    site = trees["site"]
    killed = run_tool(
        [command, "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=1, match=relative, act=KILL,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr


def test_a_kill_after_the_first_rename_leaves_a_record_of_a_commit_under_way(trees: dict) -> None:
    site = trees["site"]
    # The modules and the seams are in place when the registry's turn comes.
    _kill_as_it_replaces(trees, REGISTRY)
    assert (site / INSTALLED[0]).read_bytes() == trees["applied"][INSTALLED[0]]
    assert json.loads((site / RECORD).read_bytes())["phase"] == "committing"
    finished = run_tool(["apply", "--site-packages", str(site)])
    assert finished.returncode == 0, finished.stderr
    assert "finished an interrupted apply" in finished.stdout
    assert snapshot(site) == trees["applied"]


# (the command killed, the call it is killed at, the phase its record is
# left in, what the next run of the same command says of it): a commit that
# had renamed nothing is dropped and planned afresh; one under way is
# finished from a plan of its own, never dropped half-way.
KILLED_COMMITS = [
    ("apply", dict(at=2, match=".dflash2-backport-new", ops="create"), "staging",
     "an interrupted apply had not replaced any file yet; it was dropped"),
    ("apply", dict(at=1, match=REGISTRY), "committing", "finished an interrupted apply: "),
    ("revert", dict(at=2, match=".dflash2-backport-new", ops="create"), "staging",
     "an interrupted revert had not replaced any file yet; it was dropped"),
    ("revert", dict(at=1, match=REGISTRY), "committing", "finished an interrupted revert: "),
]


@pytest.mark.parametrize("command, kill, phase, said", KILLED_COMMITS,
                         ids=[f"{c[0]} {c[2]}" for c in KILLED_COMMITS])
def test_a_killed_commit_is_dropped_before_its_first_rename_and_finished_after_it(
    trees: dict, command: str, kill: dict, phase: str, said: str
) -> None:
    site = trees["site"]
    start, goal = ("pristine", "applied") if command == "apply" else ("applied", "pristine")
    _restore(site, trees[start])
    killed = run_tool([command, "--site-packages", str(site)], timeout=60,
                      hook=trees["hook"], root=site, act=KILL, **kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert json.loads((site / RECORD).read_bytes())["phase"] == phase
    again = run_tool([command, "--site-packages", str(site)], timeout=60)
    assert again.returncode == 0, again.stderr
    notes = [line for line in again.stdout.splitlines() if "an interrupted" in line]
    assert len(notes) == 1 and said in notes[0], again.stdout
    assert snapshot(site) == trees[goal]
    assert leftovers(site) == []


def test_recovery_refuses_a_file_edited_between_the_kill_and_the_next_run(trees: dict) -> None:
    site = trees["site"]
    _kill_as_it_replaces(trees, REGISTRY)
    with open(site / CONFIG, "a") as handle:
        handle.write("# a user's edit\n")
    before = _without_lock(site)
    result = run_tool(["apply", "--site-packages", str(site)])
    assert result.returncode == 2
    assert f"{CONFIG} holds neither the content it had before" in result.stderr
    assert _without_lock(site) == before


def test_the_records_own_staged_copy_is_swept_when_no_record_was_written(trees: dict) -> None:
    site = trees["site"]
    _restore(site, trees["applied"])
    # The first write of a revert puts its record in place: killed there, only
    # the record's staged copy is left, and no record.
    _kill_as_it_replaces(trees, RECORD, command="revert")
    assert not (site / RECORD).exists() and leftovers(site)
    result = run_tool(["apply", "--site-packages", str(site)])
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout
    assert leftovers(site) == []
    assert snapshot(site) == trees["applied"]


def test_recovery_waits_for_the_lock_and_never_finishes_a_live_writers_commit(
    trees: dict,
) -> None:
    from dflash2_backport.transaction.lock import TreeLock

    site = trees["site"]
    _kill_as_it_replaces(trees, REGISTRY)
    interrupted = _without_lock(site)
    with TreeLock(site, "apply") as lock:
        lock.acquire(5, lambda _: None)
        waiter = start_tool(["apply", "--site-packages", str(site)])
        time.sleep(3)
        assert waiter.poll() is None
        assert _without_lock(site) == interrupted
    stdout, stderr = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, stderr
    assert "finished an interrupted apply" in stdout
    assert snapshot(site) == trees["applied"]


def test_a_record_reached_through_a_symlink_is_refused_not_read_through(
    trees: dict, tmp_path: Path
) -> None:
    site = trees["site"]
    _kill_as_it_replaces(trees, REGISTRY)
    # A genuine record, but reached through a link: it is not acted on.
    shutil.move(site / RECORD, tmp_path / "record.json")
    (site / RECORD).symlink_to(tmp_path / "record.json")
    before = _without_lock(site)
    result = run_tool(["apply", "--site-packages", str(site)])
    assert result.returncode == 2
    assert f"{site / RECORD}: is a symlink" in result.stderr
    assert _without_lock(site) == before


def test_every_staged_file_is_fsynced_before_it_is_renamed_into_place(
    trees: dict, tmp_path: Path
) -> None:
    site = trees["site"]
    log = tmp_path / "writes.log"
    result = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=0, act="", log=log,
    )
    assert result.returncode == 0, result.stderr
    fsynced: set[str] = set()
    renamed = 0
    for line in log.read_text().splitlines():
        number, operation, *paths = line.split(" ")
        if operation == "fsync":
            fsynced.add(paths[0])
        elif operation == "replace":
            source, destination = paths
            assert source.endswith(".dflash2-backport-new"), line
            assert source in fsynced, f"{destination} renamed from a copy never fsynced"
            renamed += 1
    # The record twice, every target and new file, and RECORD.
    assert renamed == 2 + len(TARGETS) + len(INSTALLED) + 1
    assert snapshot(site) == trees["applied"]


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_sigterm_early_in_the_commit_leaves_no_lock_file(trees: dict, at: int) -> None:
    site = trees["site"]
    result = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=trees["hook"], root=site, at=at, act=signal_self("SIGTERM"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "SIGTERM" in result.stderr
    assert leftovers(site) == []


# -- a live writer, staged names, and the record's edges ----------------------------------


def _pause_at(marker: Path, seconds: float) -> str:
    return f"open({str(marker)!r}, 'w').close(); __import__('time').sleep({seconds})"


def test_a_second_apply_started_during_a_live_commit_waits_and_finds_nothing_to_do(
    trees: dict, tmp_path: Path
) -> None:
    """The holder finishes its commit before it lets go of the lock: the
    second run must read the record only once it holds the lock itself."""
    site = trees["site"]
    marker = tmp_path / "paused"
    holder = start_tool(
        ["apply", "--site-packages", str(site)], hook=trees["hook"], root=site, at=4,
        act=_pause_at(marker, 4), ops="replace",
    )
    for _ in range(1200):  # a minute at most, so that a run that never pauses fails
        if marker.exists():
            break
        assert holder.poll() is None, holder.communicate()
        time.sleep(0.05)
    assert marker.exists(), "the holder never reached its commit"
    assert json.loads((site / RECORD).read_bytes())["phase"] == "committing"
    second = run_tool(["apply", "--site-packages", str(site)])
    assert holder.wait(timeout=120) == 0, holder.communicate()
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert snapshot(site) == trees["applied"]


def _staged_files(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob(".*.dflash2-backport-new"))


def test_recovery_removes_what_the_killed_run_staged_whatever_it_holds_and_nothing_else(
    trees: dict, tmp_path: Path
) -> None:
    site = trees["site"]
    args = ["apply", "--site-packages", str(site)]
    calls = counted_calls(trees, args, "pristine", tmp_path / "calls.log")
    torn_at = [at for at, op in calls if op == "write"][4]
    _restore(site, trees["pristine"])
    killed = run_tool(args, hook=trees["hook"], root=site, at=torn_at, act=TORN, ops=EVERY_WRITE)
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((site / RECORD).read_bytes())["phase"] == "staging"
    torn = _staged_files(site)
    assert torn, "the kill left no staged file"
    registry = site / REGISTRY
    users = [
        registry.with_name(".registry.py.dflash2-backport-new"),  # the unmarked name
        registry.with_name(".registry.py.0123456789abcdef.dflash2-backport-new"),  # another run's
    ]
    for path in users:
        path.write_bytes(b"a user's file\n")
    result = run_tool(args)
    assert result.returncode == 0, result.stderr
    assert [p for p in torn if p.exists()] == []
    assert all(p.read_bytes() == b"a user's file\n" for p in users)
    for path in users:
        path.unlink()
    assert snapshot(site) == trees["applied"]


def test_check_and_apply_agree_on_a_file_at_an_unmarked_staged_name(trees: dict) -> None:
    site = trees["site"]
    planted = site / f"{Path(REGISTRY).parent}/.registry.py.dflash2-backport-new"
    planted.write_bytes(b"mine\n")
    check = run_tool(["check", "--site-packages", str(site)])
    assert check.returncode == 1, check.stderr
    apply = run_tool(["apply", "--site-packages", str(site)])
    assert apply.returncode == 0, apply.stderr
    assert planted.read_bytes() == b"mine\n"


def test_a_users_file_at_the_records_staged_name_is_kept_and_named(trees: dict) -> None:
    site = trees["site"]
    planted = site / "vllm/..dflash2-backport-intent.json.dflash2-backport-new"
    planted.write_bytes(b"my notes, not a record\n")
    result = run_tool(["apply", "--site-packages", str(site)])
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{planted}:" in result.stderr and "nothing was written" in result.stderr
    assert planted.read_bytes() == b"my notes, not a record\n"
    planted.unlink()
    assert snapshot(site) == trees["pristine"]


NO_SPACE = "raise OSError(28, 'No space left on device')"


@pytest.mark.parametrize("args, start", [(["apply"], "pristine"), (["revert"], "applied"),
                                         (["apply", "--only-pr"], "applied")],
                         ids=["apply", "revert", "apply --only-pr"])
def test_a_full_disk_as_the_committing_record_is_written_leaves_nothing_behind(
    trees: dict, args: list[str], start: str
) -> None:
    site = trees["site"]
    _restore(site, trees[start])
    result = run_tool(
        [*args, "--site-packages", str(site)], hook=trees["hook"], root=site, at=2,
        match=".dflash2-backport-intent.json.dflash2-backport-new", ops="write", act=NO_SPACE,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "No space left on device" in line and "nothing was written" in line
    assert leftovers(site) == []
    assert snapshot(site) == trees[start]


@pytest.mark.parametrize("at, written", [(1, "the record"), (2, "a file")])
def test_a_full_disk_while_staging_names_the_file_and_says_to_free_space(
    trees: dict, at: int, written: str
) -> None:
    """The staged copy is gone by the time the user reads the line: the file
    named is the one they know."""
    site = trees["site"]
    result = run_tool(
        ["apply", "--site-packages", str(site)], hook=trees["hook"], root=site, at=at,
        match=".dflash2-backport-new", ops="write", act=NO_SPACE,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    named = re.fullmatch(
        rf"dflash2-backport: error: {re.escape(str(site))}/(\S+): could not be written "
        r"\(No space left on device\); nothing was written; free space on its file "
        r"system, then run the command again", line)
    assert named, line
    expected = ["vllm/.dflash2-backport-intent.json"] if at == 1 else [*TARGETS, *INSTALLED]
    assert named[1] in expected, line
    assert snapshot(site) == trees["pristine"] and leftovers(site) == []


def test_a_signal_as_the_lock_is_let_go_reports_every_file_written(trees: dict) -> None:
    site = trees["site"]
    result = run_tool(
        ["apply", "--site-packages", str(site), "--json"], hook=trees["hook"], root=site,
        at=1, match=".dflash2-backport.lock", ops="unlink", act=signal_self("SIGTERM"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["action"] == "interrupted"
    assert set(document["changed_files"]) == _differing(trees["pristine"], trees["applied"])
    assert snapshot(site) == trees["applied"]


def _differing(a: dict[str, bytes], b: dict[str, bytes]) -> set[str]:
    """The files that one tree holds and the other lacks or holds otherwise."""
    return {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}


def test_a_symlinked_bytecode_cache_beside_a_removed_module_is_left_and_the_revert_done(
    trees: dict, tmp_path: Path
) -> None:
    site = trees["site"]
    _restore(site, trees["applied"])
    elsewhere = tmp_path / "shared-cache"
    elsewhere.mkdir()
    bytecode = elsewhere / "qwen3_dflash2.cpython-311.pyc"
    bytecode.write_bytes(b"\x00pyc")
    (site / INSTALLED[0]).parent.joinpath("__pycache__").symlink_to(elsewhere)
    result = run_tool(["revert", "--site-packages", str(site), "--json"])
    assert result.returncode == 0, result.stdout + result.stderr
    changed = set(json.loads(result.stdout)["changed_files"])
    assert changed == _differing(trees["pristine"], trees["applied"])
    assert bytecode.read_bytes() == b"\x00pyc"
    assert not (site / RECORD).exists() and leftovers(site) == []
    assert {p: d for p, d in snapshot(site).items()} == trees["pristine"]
    again = run_tool(["apply", "--site-packages", str(site)])
    assert again.returncode == 0, again.stderr


def test_a_directory_at_the_records_name_is_named_as_one(trees: dict) -> None:
    site = trees["site"]
    (site / RECORD).mkdir()
    for command in ("check", "apply"):
        result = run_tool([command, "--site-packages", str(site)])
        assert result.returncode == 2, result.stdout + result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert f"{site / RECORD}: is a directory" in line, line


def test_the_hint_after_an_interrupted_apply_only_pr_repeats_the_edit_set_and_target(
    trees: dict,
) -> None:
    site = trees["site"]
    _restore(site, trees["applied"])
    killed = run_tool(["apply", "--only-pr", "--site-packages", str(site)],
                      hook=trees["hook"], root=site, at=4, act=KILL)
    assert killed.returncode == -signal.SIGKILL
    check = run_tool(["check", "--site-packages", str(site)])
    assert check.returncode == 2
    assert f"run `dflash2-backport apply --only-pr --site-packages {site}` to finish it" \
        in check.stderr, check.stderr
    finished = run_tool(["apply", "--only-pr", "--site-packages", str(site)])
    assert finished.returncode == 0, finished.stderr
    assert "finished an interrupted apply --only-pr" in finished.stdout
    assert snapshot(site) == trees["only_pr"]


def _another_runs_record(record: Path) -> str:
    """A line of Python that puts another run's record (its own pid and
    nonce) in place of this run's, as a run that takes the commit over does."""
    return "; ".join([
        "import json",
        f"document = json.load(open({str(record)!r}))",
        "document.update(pid=1, nonce='f' * 16)",
        f"open({str(record)!r}, 'w').write(json.dumps(document))",
    ])


def test_a_run_whose_record_another_run_replaced_undoes_nothing(trees: dict) -> None:
    """Half-way through the commit, another run takes it over: its record
    replaces this one's, and it removes this run's staged files. That the
    files renamed so far hold this run's bytes is no proof that nobody else
    committed: the run must leave them, and the other run's record, alone."""
    site = trees["site"]
    record = site / RECORD
    take_over = "; ".join([
        _another_runs_record(record),
        "import glob",
        f"[os.unlink(p) for p in glob.glob({str(site)!r} + '/**/.*.dflash2-backport-new',"
        " recursive=True)]",
    ])
    result = run_tool(["apply", "--site-packages", str(site)], hook=trees["hook"], root=site,
                      at=8, ops="replace", act=take_over)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{record}: no longer the record this run wrote" in line, line
    assert "nothing was undone" in line
    assert json.loads(record.read_bytes())["nonce"] == "f" * 16
    in_place = [p for p in trees["applied"] if p != RECORD
                and trees["pristine"].get(p) != trees["applied"][p]
                and (site / p).exists() and (site / p).read_bytes() == trees["applied"][p]]
    # The eighth replace: the record's two, then this run's sixth file.
    assert len(in_place) == 5, in_place



def test_a_run_whose_record_another_run_replaced_while_it_staged_leaves_that_record_alone(
    trees: dict,
) -> None:
    """Taken over before its first rename: the run drops what it staged,
    but the record on disk and the directories it would remove are the
    other run's now, to finish or drop."""
    site = trees["site"]
    record = site / RECORD
    take_over = _another_runs_record(record)
    # The third staged file: the record's own copy and the first file's are done.
    result = run_tool(["apply", "--site-packages", str(site)], hook=trees["hook"], root=site,
                      at=3, match=".dflash2-backport-new", ops="create", act=take_over)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{record}: no longer the record this run wrote" in line, line
    assert "after 0 of this run's files were in place, so nothing was undone" in line
    document = json.loads(record.read_bytes())
    assert (document["nonce"], document["phase"]) == ("f" * 16, "staging")
    for directory in document["directories"]:
        assert (site / directory).is_dir(), directory
    # What this run staged is gone; the record is the other run's.
    assert leftovers(site) == [RECORD]