"""The verdict cache is used only where no one but the user can have written it.

An entry decides which files `apply` leaves alone. Root runs the tool with a
user's HOME (`sudo -E`), or with the variable naming a shared directory: an
entry another user forged there must not make root's `apply` skip a file.
The tests run as root and hand directories and entries to `nobody`, as that
other user would own them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from dflash2_backport import transforms
from dflash2_backport.transforms.framework.vocabulary import EditReport, HunkVerdict, State
from dflash2_backport.engine import verdict_cache
from tests.trees import TARGETS, make_site

NOBODY = pwd.getpwnam("nobody").pw_uid
GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="hands files to another user")

# One file's verdicts, as the judges would give them, under a made-up key.
REPORTS = [
    EditReport(
        "registry",
        "vllm/model_executor/models/registry.py",
        "registers the draft model",
        (HunkVerdict("entry", State.APPLIED, "", "the draft model is found by name"),),
    )
]
KEY = ("judges", "apply", "vllm/model_executor/models/registry.py", b"content")


@pytest.fixture(params=["the variable's directory", "under XDG_CACHE_HOME"])
def cache(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this run's entries go: the variable's directory, or the tool's
    own under the user's cache base."""
    monkeypatch.delenv("DFLASH2_BACKPORT_CACHE_DIR", raising=False)
    if request.param == "the variable's directory":
        monkeypatch.setenv("DFLASH2_BACKPORT_VERDICT_CACHE", str(tmp_path / "verdicts"))
        return tmp_path / "verdicts"
    monkeypatch.delenv("DFLASH2_BACKPORT_VERDICT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "dflash2-backport" / "verdicts"


def entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.json")) if cache.is_dir() else []


def linked_to_a_copy(entry: Path) -> None:
    copy = entry.with_name("copy")
    shutil.copy2(entry, copy)
    entry.unlink()
    entry.symlink_to(copy)


# Each: how the entry comes to be one the user cannot vouch for.
FOREIGN_ENTRIES = {
    "another user's": lambda entry: os.chown(entry, NOBODY, -1),
    "writable by its group": lambda entry: entry.chmod(0o620),
    "writable by anyone": lambda entry: entry.chmod(0o606),
    "a link to a copy of the user's own": linked_to_a_copy,
}


@pytest.mark.parametrize("make_foreign", FOREIGN_ENTRIES.values(), ids=FOREIGN_ENTRIES.keys())
def test_an_entry_someone_else_could_have_written_is_not_read(cache: Path, make_foreign) -> None:
    verdict_cache.store(*KEY, REPORTS)
    assert verdict_cache.lookup(*KEY) == REPORTS
    (entry,) = entries(cache)
    make_foreign(entry)
    assert verdict_cache.lookup(*KEY) is None


def the_verdicts_directory(cache: Path) -> Path:
    return cache


def the_entrys_directory(cache: Path) -> Path:
    (entry,) = entries(cache)
    return entry.parent


# Each: (which directory, and what is done to it).
FOREIGN_DIRECTORIES = {
    "the verdicts directory is another user's":
        (the_verdicts_directory, lambda d: os.chown(d, NOBODY, -1)),
    "an entry's directory is another user's":
        (the_entrys_directory, lambda d: os.chown(d, NOBODY, -1)),
}


@pytest.mark.parametrize(
    ("which", "make_foreign"), FOREIGN_DIRECTORIES.values(), ids=FOREIGN_DIRECTORIES.keys()
)
def test_a_cache_directory_someone_else_could_write_in_is_neither_read_nor_written(
    cache: Path, which, make_foreign
) -> None:
    verdict_cache.store(*KEY, REPORTS)
    make_foreign(which(cache))
    assert verdict_cache.lookup(*KEY) is None
    (entry,) = entries(cache)
    entry.unlink()
    verdict_cache.store(*KEY, REPORTS)
    assert entries(cache) == []


# (which directory, its mode, whether the tool made it: then it takes it back)
OPEN_DIRECTORIES = [
    ("the verdicts directory", 0o770),
    ("the verdicts directory", 0o777),
    ("an entry's directory", 0o730),
    ("an entry's directory", 0o775),
]


@pytest.mark.parametrize("which, mode", OPEN_DIRECTORIES)
def test_a_directory_others_may_write_in_is_taken_back_if_the_tool_made_it_else_not_used(
    cache: Path, which: str, mode: int
) -> None:
    verdict_cache.store(*KEY, REPORTS)
    directory = the_verdicts_directory(cache) if which.startswith("the verdicts") \
        else the_entrys_directory(cache)
    directory.chmod(mode)
    the_variables_own = directory == cache and "dflash2-backport" not in str(cache)
    if the_variables_own:  # a directory the user named: theirs to open, not the tool's
        assert verdict_cache.lookup(*KEY) is None
        assert oct(directory.stat().st_mode & 0o777) == oct(mode)
    else:
        assert verdict_cache.lookup(*KEY) == REPORTS
        assert oct(directory.stat().st_mode & 0o777) == oct(mode & ~0o022)


def test_an_entry_moved_to_another_entrys_name_answers_for_nothing(cache: Path) -> None:
    """In a directory others could write in, before the tool took it back,
    someone could move the user's own entries about."""
    other = (*KEY[:3], b"other content")
    verdict_cache.store(*KEY, REPORTS)
    verdict_cache.store(*other, [])
    assert verdict_cache.lookup(*other) == []
    (first, second) = entries(cache)
    moved_from, moved_to = (first, second)
    moved_from.replace(moved_to)  # one of the two now stands under the other's name
    answers = [verdict_cache.lookup(*KEY), verdict_cache.lookup(*other)]
    assert answers.count(None) == 2, answers


def test_the_tools_own_directory_in_a_users_cache_must_be_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DFLASH2_BACKPORT_VERDICT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    verdict_cache.store(*KEY, REPORTS)
    os.chown(tmp_path / "xdg" / "dflash2-backport", NOBODY, -1)
    assert verdict_cache.lookup(*KEY) is None


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077])
def test_the_tool_makes_its_cache_for_its_user_alone_whatever_the_umask(
    cache: Path, umask: int
) -> None:
    previous = os.umask(umask)
    try:
        verdict_cache.store(*KEY, REPORTS)
    finally:
        os.umask(previous)
    (entry,) = entries(cache)
    made = [entry.parent, cache]
    if cache.parent.name == "dflash2-backport":  # and the missing XDG_CACHE_HOME
        made += [cache.parent, cache.parent.parent]
    assert [oct(stat.S_IMODE(d.stat().st_mode)) for d in made] == ["0o700"] * len(made)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert verdict_cache.lookup(*KEY) == REPORTS


@pytest.mark.parametrize(
    ("owner", "mode", "made"),
    [
        pytest.param(NOBODY, 0o755, False, id="another user's home"),
        pytest.param(NOBODY, 0o1777, True, id="a sticky directory anyone may write, as /tmp"),
        pytest.param(0, 0o755, True, id="the user's own"),
    ],
)
def test_the_cache_is_made_only_where_no_one_else_can_move_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: int, mode: int, made: bool
) -> None:
    """Root making ~/.cache in a user's home (`sudo -E`) would leave the
    user a cache directory they cannot use."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, owner, -1)
    home.chmod(mode)
    monkeypatch.delenv("DFLASH2_BACKPORT_VERDICT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(home))
    verdict_cache.store(*KEY, REPORTS)
    assert (home / ".cache").exists() is made
    assert (verdict_cache.lookup(*KEY) == REPORTS) is made


# -- through the command line, on a real 0.27.1 tree ------------------------------------

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def swap_pending_for_applied(cache: Path, path: str) -> Path:
    """Make the entry of `path`'s unpatched bytes say what the entry of its
    patched bytes says: every edit applied. The forged entry."""
    by_state = {}
    for entry in entries(cache):
        edits = json.loads(entry.read_text())["edits"]
        if edits[0]["file"] == path:
            by_state[frozenset(e["state"] for e in edits)] = entry
    pending, applied = by_state[frozenset({"pending"})], by_state[frozenset({"applied"})]
    shutil.copyfile(applied, pending)
    return pending


def chown_all(top: Path) -> None:
    for directory, _, files in os.walk(top):
        os.chown(directory, NOBODY, -1)
        for name in files:
            os.chown(os.path.join(directory, name), NOBODY, -1)


# Each: (where the cache is, who could have written it).
FORGERS = {
    "a user's HOME, under sudo -E": ("home", chown_all),
    "a cache directory another user owns": ("variable", chown_all),
    "a shared cache directory its group may write": ("variable", lambda d: d.chmod(0o770)),
}


@pytest.mark.wheels
@pytest.mark.parametrize(("where", "forger"), FORGERS.values(), ids=FORGERS.keys())
def test_a_forged_entry_in_a_cache_others_could_write_does_not_stop_apply_patching_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, forger
) -> None:
    if where == "home":
        monkeypatch.delenv("DFLASH2_BACKPORT_VERDICT_CACHE")
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        cache = tmp_path / "home"
        cache.mkdir()
    else:
        monkeypatch.setenv("DFLASH2_BACKPORT_VERDICT_CACHE", str(tmp_path / "verdicts"))
        cache = tmp_path / "verdicts"
    # The other user fills the cache from a tree of their own, patched...
    theirs = make_site("0.27.1", tmp_path / "theirs")
    assert invoke("apply", "--site-packages", str(theirs)).exit_code == 0
    assert invoke("check", "--site-packages", str(theirs)).exit_code == 0
    # ...and says the unpatched gumbel.py needs nothing.
    swap_pending_for_applied(cache, GUMBEL)
    forger(cache)

    pristine = make_site("0.27.1", tmp_path / "pristine")
    site = make_site("0.27.1", tmp_path / "site")
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    unchanged = [p for p in TARGETS if (site / p).read_bytes() == (pristine / p).read_bytes()]
    assert unchanged == []
    monkeypatch.setenv("DFLASH2_BACKPORT_VERDICT_CACHE", str(tmp_path / "empty"))
    again = invoke("check", "--site-packages", str(site), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["action"] == "nothing-to-do"


@pytest.mark.wheels
@pytest.mark.parametrize("umask", [0o002, 0o022])
def test_the_users_own_cache_answers_a_second_check_without_judging(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, umask: int
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    parsed: list[str] = []
    read = transforms.framework.source.Source.__init__

    def counted(self, text: str) -> None:
        parsed.append(text)
        read(self, text)

    monkeypatch.setattr(transforms.framework.source.Source, "__init__", counted)
    previous = os.umask(umask)
    try:
        first = invoke("check", "--site-packages", str(site))
        judged = len(parsed)
        second = invoke("check", "--site-packages", str(site))
    finally:
        os.umask(previous)
    assert (first.exit_code, second.exit_code) == (1, 1)
    assert second.output == first.output
    assert judged > 0
    assert len(parsed) == judged  # the second judged nothing
