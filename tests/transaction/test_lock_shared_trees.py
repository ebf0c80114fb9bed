"""The lock holds for a user who may write `vllm/` but not the lock file.

Three common ways to get there, each set up for real: a root run killed
between creating the lock and handing it to the tree's owner (a root-owned
0644 lock), a lock left read-only, and a group-shared tree whose lock
belongs to the member who ran first. In each, eight runs of a non-root user
start at once, as the ranks of a multi-GPU job do; every one must exit 0
and the tree must end whole.

The runs take a real uid and gid with `setpriv`, keeping only the
capability to read and search (so that they reach the interpreter and the
sources wherever the checkout lives); writing stays bound by the
permission bits, which is what is under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trees import make_site, snapshot

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.faults,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root and setpriv to run the tool as other users",
    ),
]

USER, OTHER_MEMBER, GROUP = 4242, 4244, 4343
LOCK = "vllm/.dflash2-backport.lock"
RANKS = 8


def as_user(uid: int, gid: int, groups: tuple[int, ...] = ()) -> list[str]:
    group_option = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return [
        "setpriv", f"--reuid={uid}", f"--regid={gid}", group_option,
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
    ]


def own_tree(site: Path, uid: int, gid: int, shared: bool) -> None:
    for path in [site, *site.rglob("*")]:
        os.lchown(path, uid, gid)
        if shared:
            os.chmod(path, 0o2775 if path.is_dir() else 0o664)


def a_roots_lock_left_by_a_kill(site: Path) -> None:
    lock = site / LOCK
    lock.write_text("pid 1 on elsewhere (dflash2-backport apply, since 00:00:00)\n")
    os.chown(lock, 0, 0)
    lock.chmod(0o644)


def a_read_only_lock(site: Path) -> None:
    lock = site / LOCK
    lock.write_text("")
    os.chown(lock, USER, GROUP)
    lock.chmod(0o444)


def another_members_lock(site: Path) -> None:
    lock = site / LOCK
    lock.write_text("")
    os.chown(lock, OTHER_MEMBER, GROUP)
    lock.chmod(0o644)


SETUPS = [
    ("root's lock left by a kill", a_roots_lock_left_by_a_kill, False),
    ("a read-only lock", a_read_only_lock, False),
    ("another member's lock in a group-shared tree", another_members_lock, True),
]


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The bytes of 0.27.1 and of a reference apply, by relative path."""
    from tests.faults import run_tool

    site = make_site("0.27.1", tmp_path_factory.mktemp("reference") / "site")
    pristine = snapshot(site)
    assert run_tool(["apply", "--site-packages", str(site)]).returncode == 0
    return {"pristine": pristine, "applied": snapshot(site)}


def _user_environment(home: Path) -> dict:
    home.mkdir(exist_ok=True)
    os.chown(home, USER, GROUP)
    environment = dict(os.environ, HOME=str(home), TMPDIR=str(home),
                       DFLASH2_BACKPORT_VERDICT_CACHE=str(home / "verdicts"),
                       XDG_CACHE_HOME=str(home / "cache"))
    return environment


def _restore(site: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    for path in sorted(site.rglob("*"), reverse=True):
        relative = str(path.relative_to(site))
        if path.is_file() and relative not in files and not relative.endswith(".lock"):
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def without_lock(site: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(site).items() if not k.endswith(".lock")}


@pytest.mark.parametrize("set_up, shared", [s[1:] for s in SETUPS], ids=[s[0] for s in SETUPS])
def test_eight_runs_at_once_all_succeed_and_leave_the_tree_whole_under_an_unwritable_lock(
    tmp_path: Path, references: dict, set_up, shared: bool
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    # The option parser checks the path with access(2), which the read
    # capability does not satisfy: let the user search the way to it.
    for directory in [tmp_path, *tmp_path.parents]:
        if not directory.stat().st_mode & 0o001:
            directory.chmod(directory.stat().st_mode | 0o001)
    environment = _user_environment(tmp_path / "home")
    prefix = as_user(USER, GROUP, (GROUP,) if shared else ())
    for round_, (command, start, goal) in enumerate(
        [("apply", "pristine", "applied"), ("revert", "applied", "pristine")] * 2
    ):
        _restore(site, references[start])
        own_tree(site, USER, GROUP, shared)
        set_up(site)
        processes = [
            subprocess.Popen(
                [*prefix, sys.executable, "-m", "dflash2_backport", command,
                 "--site-packages", str(site), "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
            )
            for _ in range(RANKS)
        ]
        outcomes = [(p.wait(timeout=300), *p.communicate()) for p in processes]
        for code, stdout, stderr in outcomes:
            assert code == 0, f"round {round_} ({command}): {stdout}{stderr}"
        actions = sorted(json.loads(stdout)["action"] for _, stdout, _ in outcomes)
        written = {"apply": "applied", "revert": "reverted"}[command]
        assert actions == sorted(["nothing-to-do"] * (RANKS - 1) + [written]), actions
        assert without_lock(site) == references[goal], f"round {round_}: the tree is not whole"


def test_the_owner_finishes_what_a_killed_root_run_staged_in_their_tree(
    tmp_path: Path, references: dict
) -> None:
    """Root's `apply`, killed half-way through writing a staged file in a
    user's venv, leaves a root-owned 0600 file there; the user's own next
    `apply` removes it and finishes."""
    from tests.faults import TORN, install_hook, run_tool

    site = make_site("0.27.1", tmp_path / "site")
    for directory in [tmp_path, *tmp_path.parents]:
        if not directory.stat().st_mode & 0o001:
            directory.chmod(directory.stat().st_mode | 0o001)
    own_tree(site, USER, GROUP, shared=False)
    killed = run_tool(["apply", "--site-packages", str(site)], hook=install_hook(tmp_path / "hook"),
                      root=site, at=8, act=TORN, ops="write")
    assert killed.returncode < 0, killed.stderr
    left = [p for p in site.rglob(".*.dflash2-backport-new") if p.stat().st_uid == 0]
    assert left, "the kill left no root-owned staged file"
    result = subprocess.run(
        [*as_user(USER, GROUP), sys.executable, "-m", "dflash2_backport", "apply",
         "--site-packages", str(site)],
        capture_output=True, text=True, env=_user_environment(tmp_path / "home"), timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert without_lock(site) == references["applied"]
    assert not any(site.rglob(".*.dflash2-backport-new"))
