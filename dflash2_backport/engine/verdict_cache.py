"""Remembered verdicts, per file, so that `check` judges only what changed.

A pre-commit hook runs `check` on every commit, and a commit rarely changes
more than one of the seven files. An entry holds one file's edit reports and
is named by the hash of everything its verdicts depend on: the file's path
and content, the direction each of its edits is judged in (a revert also
asks whether other code reads what it would remove, and `apply --only-pr`
undoes the fixes while it applies the PR's edits), and the source of the
judges that produced them. A changed
file, or changed judges, cannot find a stale entry; other trees with the same
file share it. A cache that cannot be read or written is simply not used.

Nor is one that anyone but the user running the tool could have written. An
entry decides which files a command leaves alone: one forged by another user
makes `apply` skip a file and report success over a vLLM that no longer
imports. Root often runs the tool with a user's HOME (`sudo -E`), and the
variable may name a shared directory. So, as pip does with its cache, the
directories the tool makes under the cache's base (or the one the variable
names) are used only while the effective user owns them and no one else may
write in them, and an entry only while that user owns it and no one else may
write it. Each is checked on the descriptor it is reached through, one name
at a time without following links, so nothing can be swapped in between the
check and the read. The tool makes them for its user alone, whatever the
umask, and only where that user may: in a directory of its own, or a sticky
one like /tmp. One of its own directories that others may write in (an
earlier version made them under the umask, 002 on many systems) is taken
back, not given up: each entry holds its key, so an entry of the user's
moved to another's name meanwhile answers for nothing. Root making a user's ~/.cache/dflash2-backport would leave the
user a cache they cannot use.
Nothing here parses: a cached answer is reported without reading a tree.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
from pathlib import Path

from .. import __version__
from ..transforms.framework import hunk_files
from ..transforms.framework.vocabulary import EditReport


def _location() -> tuple[Path, tuple[str, ...]]:
    """The directory the cache is kept under, and the names below it of the
    directories the tool makes there; none when the variable names the
    cache's own directory."""
    # DFLASH2_BACKPORT_CACHE_DIR: the earlier name, still honoured.
    configured = os.environ.get("DFLASH2_BACKPORT_VERDICT_CACHE") or os.environ.get(
        "DFLASH2_BACKPORT_CACHE_DIR"
    )
    if configured:
        return Path(configured), ()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base), ("dflash2-backport", "verdicts")


@functools.cache
def judges_digest(judges: Path) -> str:
    """The tool's version, the modules of the package at `judges` but its
    writers (they decide no verdict), the hunk files its edits read, and the
    module that runs the judges."""
    digest = hashlib.sha256(__version__.encode())
    # Walked with os, not pathlib: this runs on every command, warm `check`
    # included.
    parent = len(str(judges.parent)) + 1
    for path in [*_judging_modules(str(judges)), str(Path(__file__).with_name("judge.py"))]:
        digest.update(path[parent:].replace(os.sep, "/").encode() + b"\0")
        with open(path, "rb") as file:
            digest.update(file.read())
    for name, data in sorted(hunk_files.READ.items()):
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()


def _judging_modules(judges: str) -> list[str]:
    writing = os.path.join(judges, "framework", "writing")
    found = []
    for directory, folders, files in os.walk(judges):
        folders[:] = [
            f for f in folders
            if f not in ("__pycache__", "hunks") and os.path.join(directory, f) != writing
        ]
        found += [os.path.join(directory, f) for f in files if f != "writer.py"]
    return sorted(found)


def _entry(judges: str, directions: str, path: str, data: bytes) -> tuple[str, str, str]:
    """The entry's directory under the cache's, its name there, and the key
    it must hold: an entry of the user's own moved to another's name (in a
    directory others could once write in) answers for nothing."""
    key = hashlib.sha256(
        b"\0".join([judges.encode(), directions.encode(), path.encode(), data])
    ).hexdigest()
    return key[:2], f"{key[2:34]}.json", key


def lookup(judges: str, directions: str, path: str, data: bytes) -> list[EditReport] | None:
    """The file's edit reports, if these judges judged this content before
    with its edits in these directions (`transforms.directions`)."""
    shard, name, key = _entry(judges, directions, path, data)
    directory = _directory(shard, make=False)
    if directory is None:
        return None
    try:
        # Non-blocking: a FIFO put in its place would block the read forever.
        descriptor = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not (stat.S_ISREG(info.st_mode) and _users_own(info)):
                return None
            entry = json.loads(handle.read())
        if entry["key"] != key:
            return None
        return [EditReport.from_json(e) for e in entry["edits"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(directory)


def store(
    judges: str,
    directions: str,
    path: str,
    data: bytes,
    edits: list[EditReport],
) -> None:
    shard, name, key = _entry(judges, directions, path, data)
    directory = _directory(shard, make=True)
    if directory is None:
        return
    temporary = f"{name}.{os.urandom(6).hex()}.tmp"
    try:
        descriptor = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=directory,
        )
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"key": key, "edits": [e.to_json() for e in edits]}, handle)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
    finally:
        os.close(directory)


# -- whose cache ------------------------------------------------------------------

_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _users_own(info: os.stat_result) -> bool:
    """Whether only the user running the tool (or root) can have written it."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _may_make_in(info: os.stat_result) -> bool:
    # In a sticky directory no one else can move what the user makes there.
    return info.st_uid == os.geteuid() or bool(info.st_mode & stat.S_ISVTX)


def _directory(shard: str, make: bool) -> int | None:
    """A descriptor of the directory that holds `shard`'s entries, where only
    the user can have put them; with `make`, made where missing. None when
    the cache is not to be used."""
    base, names = _location()
    try:
        if make:
            _make_base(base)
        # Followed where it is a link (a ~/.cache kept on another disk): what
        # is checked is the directory it leads to.
        descriptor = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    # ~/.cache holds other tools' caches too, and only the tool's own
    # directories in it hold entries; the variable's directory holds them.
    if not names and not _users_own(os.fstat(descriptor)):
        os.close(descriptor)
        return None
    for name in (*names, shard):
        parent = descriptor
        try:
            descriptor = _child(parent, name, make)
        except OSError:
            return None
        finally:
            os.close(parent)
        if not _users_own(_narrowed(descriptor)):
            os.close(descriptor)
            return None
    return descriptor


def _narrowed(descriptor: int) -> os.stat_result:
    """A directory of the tool's own that others may write in (one an earlier
    version made under a umask such as 002) is taken back: no one else's
    entry is read from it, and one of the user's moved to another name is
    told by its key."""
    info = os.fstat(descriptor)
    if info.st_uid == os.geteuid() and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        with contextlib.suppress(OSError):
            os.fchmod(descriptor, stat.S_IMODE(info.st_mode) & ~0o022)
            info = os.fstat(descriptor)
    return info


def _child(parent: int, name: str, make: bool) -> int:
    try:
        return os.open(name, _OPEN_DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        if not make or not _may_make_in(os.fstat(parent)):
            raise
    # A umask only takes bits away: no one else may write in it, whatever it is.
    with contextlib.suppress(FileExistsError):  # another run made it first
        os.mkdir(name, 0o700, dir_fd=parent)
    return os.open(name, _OPEN_DIRECTORY, dir_fd=parent)


def _make_base(base: Path) -> None:
    """The cache's base and its missing parents, each made only where the
    user may make it."""
    if base.is_dir():
        return
    _make_base(base.parent)
    if not _may_make_in(os.stat(base.parent)):
        raise PermissionError(f"{base.parent}: not the user's to make {base.name} in")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
