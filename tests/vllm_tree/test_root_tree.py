"""Root running the tool on a tree another user can write touches only the tool's own files.

The attacker here owns the vLLM tree (uid 4242) and may plant anything in it:
an intent record as if a run had crashed, staged files, a lock file. Root
runs the tool next. Each case has a victim that the attacker cannot write:
a root-owned file outside the tree, or one inside it. After the run the
victim is the same bytes, owner and mode, the command has exited 2 naming
the planted file, and the tree is as it was.

Planted records start from a genuine one, left by a real run killed in its
commit, so that they carry whatever the tool itself writes, and only their
steps are forged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
from pathlib import Path

import pytest

from tests.faults import KILL, append_to, install_hook, run_tool
from tests.trees import make_site

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.skipif(os.geteuid() != 0, reason="root runs the tool in these cases"),
]

ATTACKER = (4242, 4343)
RECORD = "vllm/.dflash2-backport-intent.json"
LOCK = "vllm/.dflash2-backport.lock"
CONFIG = "vllm/config/vllm.py"
GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"
REGISTRY = "vllm/model_executor/models/registry.py"
MODELS_CACHE = "vllm/model_executor/models/__pycache__"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(path: Path) -> tuple:
    """What must not change about a victim: its kind, bytes, owner and mode."""
    info = os.lstat(path)
    content = path.read_bytes() if stat.S_ISREG(info.st_mode) else stat.S_IFMT(info.st_mode)
    return content, info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), info.st_nlink


def tree_state(site: Path) -> dict:
    return {
        str(p.relative_to(site)): fingerprint(p)
        for p in sorted([site, *site.rglob("*")])
    }


def plant(path: Path, data: bytes = b"", mode: int = 0o644) -> Path:
    """A file written by the attacker."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    os.lchown(path, *ATTACKER)
    return path


def root_file(path: Path, data: bytes) -> Path:
    """A victim: a file only root may write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def genuine_record(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The record a real `apply` leaves when it is killed half-way through its commit."""
    base = tmp_path_factory.mktemp("genuine")
    site = make_site("0.27.1", base / "site")
    killed = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=install_hook(base / "hook"), root=site, at=6, act=KILL,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return json.loads((site / RECORD).read_bytes())


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A pristine vLLM 0.27.1 site-packages owned by the attacker, with one
    root-owned file inside `vllm/`."""
    site = make_site("0.27.1", tmp_path / "site")
    root_file(site / "vllm/envs.py", b"# vLLM's environment variables\n")
    for path in [site, *site.rglob("*")]:
        if path.name != "envs.py":
            os.lchown(path, *ATTACKER)
    return site


def forged(genuine: dict, steps: list[dict], directories: tuple = (), phase: str = "committing") -> bytes:
    record = dict(genuine, steps=steps, directories=list(directories), phase=phase)
    return json.dumps(record).encode()


def run_as_root(site: Path, command: str = "apply") -> object:
    return run_tool([command, "--site-packages", str(site)], timeout=60)


# -- a forged intent record ------------------------------------------------------------


def _delete_by_absolute_path(site: Path, victim: Path, genuine: dict) -> None:
    step = {"path": str(victim), "before": sha(victim.read_bytes()), "after": None}
    plant(site / RECORD, forged(genuine, [step]))


def _delete_by_dot_dot(site: Path, victim: Path, genuine: dict) -> None:
    relative = os.path.relpath(victim, site)
    step = {"path": relative, "before": sha(victim.read_bytes()), "after": None}
    plant(site / RECORD, forged(genuine, [step]))


def _replace_with_the_attackers_content(site: Path, victim: Path, genuine: dict) -> None:
    evil = b"import os; os.system('id')\n"
    relative = os.path.relpath(victim, site)
    step = {"path": relative, "before": sha(victim.read_bytes()), "after": sha(evil)}
    staged = victim.with_name(f".{victim.name}.dflash2-backport-new")
    plant(staged, evil)
    plant(site / RECORD, forged(genuine, [step]))


def _remove_empty_directories(site: Path, victim: Path, genuine: dict) -> None:
    relative = os.path.relpath(victim, site)
    plant(site / RECORD, forged(genuine, [], directories=[relative], phase="staging"))


def _glob_bytecode(site: Path, victim: Path, genuine: dict) -> None:
    # The victim is bytecode in a __pycache__; the record names "*.py" beside it.
    pattern = os.path.relpath(victim.parent.parent / "*.py", site)
    plant(site / RECORD, forged(genuine, [{"path": pattern, "before": None, "after": None}]))


def _outside(tmp_path: Path, kind: str) -> Path:
    if kind == "dir":
        victim = tmp_path / "outside" / "empty"
        victim.mkdir(parents=True)
        os.chmod(victim, 0o700)
        return victim
    if kind == "sticky":
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        os.chmod(sticky, 0o1777)
        return root_file(sticky / "shadow", b"root's secret\n")
    if kind == "pyc":
        return root_file(tmp_path / "outside" / "__pycache__" / "tool.cpython-311.pyc", b"\x00pyc")
    return root_file(tmp_path / "outside" / "victim.txt", b"root's file\n")


def _inside(site: Path, kind: str) -> Path:
    if kind == "dir":
        victim = site / "vllm" / "plugins_d"
        victim.mkdir()
        return victim
    if kind == "sticky":
        # A target root owns, in a directory whose sticky bit the attacker
        # cannot get round.
        victim = site / CONFIG
        os.chown(victim, 0, 0)
        os.chmod(victim, 0o600)
        os.chmod(victim.parent, 0o1777)
        return victim
    if kind == "pyc":
        return root_file(site / MODELS_CACHE / "registry.cpython-311.pyc", b"\x00pyc")
    return site / "vllm/envs.py"


FORGERIES = [
    ("delete by absolute path", _delete_by_absolute_path, "file"),
    ("delete by ../", _delete_by_dot_dot, "file"),
    ("replace a root-owned file in a sticky directory", _replace_with_the_attackers_content, "sticky"),
    ("remove empty directories", _remove_empty_directories, "dir"),
    ("glob bytecode", _glob_bytecode, "pyc"),
]


@pytest.mark.parametrize("where", ["outside", "inside"])
@pytest.mark.parametrize("command", ["apply", "revert"])
@pytest.mark.parametrize("forge, kind", [f[1:] for f in FORGERIES], ids=[f[0] for f in FORGERIES])
def test_a_forged_intent_record_is_refused_and_nothing_is_touched(
    site: Path, tmp_path: Path, genuine_record: dict, forge, kind: str, command: str, where: str
) -> None:
    victim = _outside(tmp_path, kind) if where == "outside" else _inside(site, kind)
    forge(site, victim, genuine_record)
    victim_before = fingerprint(victim)
    tree_before = tree_state(site)
    result = run_as_root(site, command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{site / RECORD}:" in result.stderr
    assert "Traceback" not in result.stderr
    assert fingerprint(victim) == victim_before
    assert tree_state(site) == tree_before


def _one_flaw(genuine: dict, victim: Path, site: Path, flaw: str) -> dict:
    record = json.loads(json.dumps(genuine))
    step = record["steps"][0]
    if flaw == "a path outside the tree":
        step["path"] = os.path.relpath(victim, site)
    elif flaw == "an absolute path":
        step["path"] = str(victim)
    elif flaw == "a nonce that is not one":
        record["nonce"] = "../" + record["nonce"][3:]
    elif flaw == "an unknown key":
        record["then"] = "rm -rf /"
    elif flaw == "an unknown format":
        record["format"] = "dflash2-backport intent 9"
    return record


#: (the flaw, the reason the refusal must give): each forgery is a genuine
#: record with this one flaw, so no later check can be what refuses it.
SINGLE_FLAWS = [
    ("a path outside the tree", "path '{relative}' is not one of the files this tool writes"),
    ("an absolute path", "path '{absolute}' is not one of the files this tool writes"),
    ("a nonce that is not one", "nonce '"),
    ("an unknown key", "unknown keys ['then']"),
    ("an unknown format", "format 'dflash2-backport intent 9'"),
]


@pytest.mark.parametrize("flaw, reason", SINGLE_FLAWS, ids=[f[0] for f in SINGLE_FLAWS])
def test_a_record_with_one_flaw_is_refused_for_that_flaw(
    site: Path, tmp_path: Path, genuine_record: dict, flaw: str, reason: str
) -> None:
    victim = _outside(tmp_path, "file")
    plant(site / RECORD, json.dumps(_one_flaw(genuine_record, victim, site, flaw)).encode())
    victim_before = fingerprint(victim)
    tree_before = tree_state(site)
    result = run_as_root(site)
    assert result.returncode == 2, result.stdout + result.stderr
    expected = reason.format(relative=os.path.relpath(victim, site), absolute=victim)
    assert f"{site / RECORD}: not a record this tool wrote ({expected}" in result.stderr, \
        result.stderr
    assert fingerprint(victim) == victim_before
    assert tree_state(site) == tree_before


def test_a_forged_record_is_reported_by_check_without_touching_anything(
    site: Path, tmp_path: Path, genuine_record: dict
) -> None:
    victim = _outside(tmp_path, "file")
    _delete_by_absolute_path(site, victim, genuine_record)
    before = tree_state(site)
    result = run_as_root(site, "check")
    assert result.returncode == 2
    assert f"{site / RECORD}:" in result.stderr and "not a record" in result.stderr
    assert tree_state(site) == before


# -- the lock ----------------------------------------------------------------------------


def _hard_link(victim: Path, lock: Path) -> None:
    os.link(victim, lock)


def _symlink(victim: Path, lock: Path) -> None:
    lock.symlink_to(victim)
    os.lchown(lock, *ATTACKER)


@pytest.mark.parametrize("where", ["outside", "inside"])
@pytest.mark.parametrize("plant_at_lock", [_hard_link, _symlink], ids=["hard link", "symlink"])
def test_a_link_at_the_lock_is_refused_and_what_it_names_kept(
    site: Path, tmp_path: Path, where: str, plant_at_lock
) -> None:
    victim = _outside(tmp_path, "file") if where == "outside" else site / "vllm/envs.py"
    plant_at_lock(victim, site / LOCK)
    victim_before = fingerprint(victim)
    tree_before = tree_state(site)
    result = run_as_root(site)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{site / LOCK}:" in result.stderr and "link" in result.stderr
    assert fingerprint(victim) == victim_before
    assert tree_state(site) == tree_before


# -- staged files and the sweep --------------------------------------------------------------


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_a_fifo_at_the_records_staged_name_is_refused_at_once(site: Path, command: str) -> None:
    if command == "revert":
        assert run_as_root(site, "apply").returncode == 0
    fifo = site / "vllm/..dflash2-backport-intent.json.dflash2-backport-new"
    os.mkfifo(fifo)
    os.lchown(fifo, *ATTACKER)
    before = tree_state(site)
    result = run_as_root(site, command)  # the run's timeout fails a hang
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{fifo}:" in result.stderr
    assert tree_state(site) == before


@pytest.mark.parametrize("command", ["apply", "revert"])
@pytest.mark.parametrize("kind", ["FIFO", "file"])
def test_what_stands_at_an_unmarked_staged_name_is_neither_opened_nor_removed(
    site: Path, command: str, kind: str
) -> None:
    """A run stages under names that carry its own nonce, so nothing planted
    beforehand can be at one; what is at the unmarked name is not the tool's."""
    if command == "revert":
        assert run_as_root(site, "apply").returncode == 0
    planted = site / f"{Path(GUMBEL).parent}/.gumbel.py.dflash2-backport-new"
    if kind == "FIFO":
        os.mkfifo(planted)
        os.lchown(planted, *ATTACKER)
    else:
        plant(planted, b"mine\n")
    before = fingerprint(planted)
    result = run_as_root(site, command)  # the run's timeout fails a hang
    assert result.returncode == 0, result.stdout + result.stderr
    assert fingerprint(planted) == before


def test_a_user_file_named_like_a_staged_file_survives_a_run(site: Path) -> None:
    notes = plant(site / "vllm/v1/worker/gpu/sample/.notes.txt.dflash2-backport-new", b"notes\n")
    victim_before = fingerprint(notes)
    assert run_as_root(site).returncode == 0
    assert fingerprint(notes) == victim_before
    assert run_as_root(site, "revert").returncode == 0
    assert fingerprint(notes) == victim_before


@pytest.mark.parametrize("linked", ["vllm", "vllm/v1"])
def test_a_symlinked_directory_is_refused_before_anything_is_created_or_removed(
    site: Path, tmp_path: Path, linked: str
) -> None:
    elsewhere = tmp_path / "elsewhere" / Path(linked).name
    elsewhere.parent.mkdir()
    shutil.move(site / linked, elsewhere)
    (site / linked).symlink_to(elsewhere)
    os.lchown(site / linked, *ATTACKER)
    # Files through the link that the sweep once took for its own.
    victim = root_file(
        site / "vllm/v1/worker/gpu/sample/.gumbel.py.dflash2-backport-new", b"root's\n"
    )
    victim_before = fingerprint(victim)
    outside_before = tree_state(elsewhere)
    tree_before = tree_state(site)
    result = run_as_root(site)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{site / linked}: is a symlink" in result.stderr
    assert fingerprint(victim) == victim_before
    assert tree_state(elsewhere) == outside_before
    assert tree_state(site) == tree_before


# -- what the report says -------------------------------------------------------------------


def test_a_rollback_that_leaves_files_changed_names_them(site: Path, tmp_path: Path) -> None:
    """Another program edits a file the commit already replaced, and the next
    one: the commit stops, and the first file, theirs now, keeps the edits."""
    pristine = {p: (site / p).read_bytes() for p in (GUMBEL, CONFIG)}
    act = "; ".join([append_to(site / GUMBEL, "# theirs\n"), append_to(site / CONFIG, "# theirs\n")])
    result = run_tool(
        ["apply", "--site-packages", str(site)],
        hook=install_hook(tmp_path / "hook"), root=site, at=1,
        match="vllm/v1/worker/gpu/spec_decode/__init__.py", act=act,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "nothing was written" not in result.stderr
    assert GUMBEL in result.stderr and CONFIG in result.stderr
    assert (site / CONFIG).read_bytes() == pristine[CONFIG] + b"# theirs\n"
    gumbel = (site / GUMBEL).read_bytes()
    assert gumbel.endswith(b"# theirs\n") and b"def gumbel_noised_argmax" in gumbel


@pytest.mark.parametrize("command", ["check", "apply"])
def test_root_on_another_users_tree_says_so_in_one_line(site: Path, command: str) -> None:
    result = run_tool([command, "--site-packages", str(site), "--json"])
    notes = json.loads(result.stdout)["notes"]
    assert [n for n in notes if "root" in n and "4242" in n], notes
    text = run_tool(["check", "--site-packages", str(site)]).stdout
    assert len([line for line in text.splitlines() if "uid 4242" in line]) == 1
