"""Write a plan so that no crash, signal or concurrent edit leaves a torn tree.

The way dpkg unpacks a package, in three steps:

1. **Intent.** A record of every file to replace, create or remove, with
   the SHA-256 of its content before and after, is written to
   `vllm/.dflash2-backport-intent.json` in phase "staging".
2. **Staging.** Every new content goes to `.NAME.dflash2-backport-new`
   beside its file, fsynced, with the owner and mode the file will keep.
   Then every file is compared with the bytes the plan was made from; a
   difference (someone edited it meanwhile) stops the commit here, and the
   staged files are removed: nothing was written.
3. **Commit.** The record moves to phase "committing", and each file is
   compared once more and then renamed into place (or removed), in the
   order of `layout.commit_rank`: any prefix of it is a working vLLM.
   The record is removed last.

A process killed at any point leaves the record behind. The next `apply`
or `revert` (see `finish_interrupted`) drops a commit still in staging and
completes one that was committing, file by file from the hashes, before it
plans anything of its own. `check` only reports it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import interrupts
from .errors import BackportError, Interrupted
from .layout import MODULE_FILES, TARGET_FILES
from .safe_files import read_regular

INTENT_NAME = ".dflash2-backport-intent.json"
STAGED_SUFFIX = ".dflash2-backport-new"


@dataclasses.dataclass(frozen=True)
class Change:
    path: str  # relative to the target's root
    before: bytes | None  # what the plan was made from; None: no file
    after: bytes | None  # what the commit leaves; None: the file is removed


def intent_path(root: Path) -> Path:
    return root / "vllm" / INTENT_NAME


def staged_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{STAGED_SUFFIX}")


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


# -- the commit -----------------------------------------------------------------


def commit(root: Path, command: str, changes: Sequence[Change]) -> list[str]:
    """Write `changes` (already in commit order) all or not at all."""
    if not changes:
        return []
    _check_writable(root, changes)
    directories = _missing_directories(root, changes)
    intent = {
        "command": command,
        "phase": "staging",
        "pid": os.getpid(),
        "directories": directories,
        "steps": [
            {"path": c.path, "before": _digest(c.before), "after": _digest(c.after)}
            for c in changes
        ],
    }
    new_file_mode = stat.S_IMODE(os.stat(root / "vllm" / "__init__.py").st_mode)
    paths = [c.path for c in changes]
    try:
        _commit(root, intent, changes, directories, new_file_mode)
    except Interrupted as interruption:
        if interruption.after_commit:
            interruption.written = paths
        raise
    return paths


def _commit(
    root: Path,
    intent: dict,
    changes: Sequence[Change],
    directories: list[str],
    new_file_mode: int,
) -> None:
    paths = [c.path for c in changes]
    with interrupts.held_during_commit():
        _write_intent(root, intent)
        try:
            _make_directories(root, directories)
            originals = {}
            for change in changes:
                path = root / change.path
                originals[change.path] = os.lstat(path) if change.before is not None else None
                if change.after is not None:
                    _stage(path, change.after, originals[change.path], new_file_mode)
            for change in changes:
                _compare(root, change)
        except BaseException:
            _drop_staged(root, paths, directories)
            _remove_intent(root)
            raise
        intent["phase"] = "committing"
        _write_intent(root, intent)
        done: list[Change] = []
        try:
            for change in changes:
                _compare(root, change)
                _put_in_place(root / change.path, change.after is None)
                done.append(change)
        except (BackportError, OSError) as error:
            _roll_back(root, done, originals, new_file_mode)
            _drop_staged(root, paths, directories)
            _remove_intent(root)
            if isinstance(error, BackportError):
                raise
            raise BackportError(
                f"{error.filename or root}: write failed ({error.strerror}); "
                "every file was restored"
            ) from None
        _sync_directories(root, paths)
        _remove_leftovers(root, [c.path for c in changes if c.after is None])
        _remove_intent(root)


def _check_writable(root: Path, changes: Iterable[Change]) -> None:
    # A file its owner made read-only is refused, as before any write; the
    # rename itself would only need the directory to be writable.
    for change in changes:
        path = root / change.path
        directory = path.parent
        while not directory.exists():
            directory = directory.parent
        if change.before is not None and not os.access(path, os.W_OK):
            raise BackportError(f"{path}: read-only; nothing was written")
        if not os.access(directory, os.W_OK):
            raise BackportError(f"{directory}: directory is read-only; nothing was written")


def _compare(root: Path, change: Change) -> None:
    path = root / change.path
    if read_regular(path) != change.before:
        raise BackportError(
            f"{path}: changed since it was read (another program wrote it while "
            "this one was planning); nothing was written and the change was kept; "
            "run the command again"
        )


def _missing_directories(root: Path, changes: Iterable[Change]) -> list[str]:
    missing: list[str] = []
    for change in changes:
        if change.after is None:
            continue
        directory = (root / change.path).parent
        chain = []
        while not directory.exists():
            chain.append(str(directory.relative_to(root)))
            directory = directory.parent
        for relative in reversed(chain):
            if relative not in missing:
                missing.append(relative)
    return missing


def _make_directories(root: Path, directories: list[str]) -> None:
    # A new directory takes the owner, group and mode of the one it goes into.
    for relative in directories:
        path = root / relative
        parent = os.stat(path.parent)
        path.mkdir()
        os.chmod(path, stat.S_IMODE(parent.st_mode))
        _chown_like(path, None, parent)


def _stage(path: Path, data: bytes, original: os.stat_result | None, new_mode: int) -> None:
    """Write `data` beside `path`, with the owner and mode `path` has (or,
    for a new file, its directory's owner and vLLM's file mode)."""
    staged = staged_path(path)
    descriptor = os.open(
        staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
        if original is not None:
            _chown_like(path, descriptor, original)
            os.fchmod(descriptor, stat.S_IMODE(original.st_mode))
        else:
            _chown_like(path, descriptor, os.stat(path.parent))
            os.fchmod(descriptor, new_mode)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _chown_like(path: Path, descriptor: int | None, reference: os.stat_result) -> None:
    mine = os.fstat(descriptor) if descriptor is not None else os.stat(path)
    if (mine.st_uid, mine.st_gid) == (reference.st_uid, reference.st_gid):
        return
    try:
        if descriptor is not None:
            os.fchown(descriptor, reference.st_uid, reference.st_gid)
        else:
            os.chown(path, reference.st_uid, reference.st_gid)
    except PermissionError:
        if descriptor is None or os.geteuid() == 0:
            raise
        raise BackportError(
            f"{path}: owned by uid {reference.st_uid} gid {reference.st_gid}, and replacing "
            "it as this user would change that; nothing was written; run as its owner "
            "or as root"
        ) from None


def _put_in_place(path: Path, remove: bool) -> None:
    if remove:
        path.unlink()
    else:
        os.replace(staged_path(path), path)


def _roll_back(
    root: Path, done: list[Change], originals: dict, new_file_mode: int
) -> None:
    """Put back what this commit replaced, newest first. Only files this
    process has just written are touched, and each was compared with the
    plan right before: no one else's bytes are overwritten."""
    for change in reversed(done):
        path = root / change.path
        if read_regular(path) != change.after:
            continue  # rewritten since by someone else: theirs now, not ours to undo
        if change.before is None:
            path.unlink(missing_ok=True)
        else:
            _stage(path, change.before, originals[change.path], new_file_mode)
            os.replace(staged_path(path), path)


def _drop_staged(root: Path, paths: Iterable[str], directories: list[str]) -> None:
    for relative in paths:
        staged_path(root / relative).unlink(missing_ok=True)
    for relative in reversed(directories):
        try:
            (root / relative).rmdir()
        except OSError:
            pass  # not empty: something else lives there now


def _sync_directories(root: Path, paths: Iterable[str]) -> None:
    for directory in sorted({(root / p).parent for p in paths if (root / p).parent.is_dir()}):
        _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename stands
    finally:
        os.close(descriptor)


def _remove_leftovers(root: Path, removed: Iterable[str]) -> None:
    """Bytecode of removed modules, and their package directory once empty."""
    for relative in removed:
        path = root / relative
        cache = path.parent / "__pycache__"
        if cache.is_dir() and not cache.is_symlink():
            for compiled in cache.glob(f"{path.stem}.*.pyc"):
                compiled.unlink(missing_ok=True)
        for directory in (cache, path.parent):
            try:
                directory.rmdir()
            except OSError:
                pass  # not empty, or already gone: someone else's files stay


# -- the intent record -------------------------------------------------------------


def _write_intent(root: Path, intent: dict) -> None:
    path = intent_path(root)
    staged = staged_path(path)
    descriptor = os.open(
        staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    try:
        os.write(descriptor, json.dumps(intent, indent=1).encode())
        _chown_like(staged, descriptor, os.stat(path.parent))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(staged, path)
    _fsync_directory(path.parent)


def _remove_intent(root: Path) -> None:
    intent_path(root).unlink(missing_ok=True)
    _fsync_directory(intent_path(root).parent)


def read_intent(root: Path) -> dict | None:
    """The record an interrupted commit left, or None."""
    path = intent_path(root)
    data = read_regular(path)
    if data is None:
        return None
    try:
        intent = json.loads(data)
        if intent["phase"] not in ("staging", "committing"):
            raise ValueError(intent["phase"])
        for step in intent["steps"]:
            step["path"], step["before"], step["after"]  # noqa: B018 - shape check
        intent["directories"]
        return intent
    except (ValueError, KeyError, TypeError):
        raise BackportError(
            f"{path}: an interrupted commit's record is unreadable; nothing was written; "
            "compare the tree with a fresh vLLM 0.27.1, then remove the file"
        ) from None


def interrupted_message(root: Path, intent: dict) -> str:
    command = intent["command"]
    return (
        f"{root}: a `dflash2-backport {command}` was interrupted while writing "
        f"(record {intent_path(root).name} in vllm/); run `dflash2-backport {command}` "
        "on this target again to finish it"
    )


# -- recovery ----------------------------------------------------------------------


def finish_interrupted(root: Path) -> str | None:
    """Drop or complete a commit a killed process left, and sweep the
    tool's temporary files. Run under the lock, before planning. Returns a
    note for the report, or None when there was nothing to finish."""
    intent = read_intent(root)
    if intent is None:
        _sweep_staged(root)
        return None
    command = intent["command"]
    steps = intent["steps"]
    paths = [step["path"] for step in steps]
    if intent["phase"] == "staging":
        _drop_staged(root, paths, intent["directories"])
        _sweep_staged(root)
        _remove_intent(root)
        return f"an interrupted {command} had not replaced any file yet; it was dropped"
    with interrupts.held_during_commit():
        finished = 0
        for step in steps:
            path = root / step["path"]
            now = _digest(read_regular(path))
            if now == step["after"]:
                continue
            if now != step["before"]:
                raise BackportError(
                    f"{path}: changed since an interrupted {command} began, so it cannot "
                    "be finished safely; nothing was written; compare the file with "
                    f"vLLM 0.27.1, then remove {intent_path(root)} and run the command again"
                )
            if step["after"] is None:
                path.unlink()
            else:
                staged = staged_path(path)
                if _digest(read_regular(staged)) != step["after"]:
                    raise BackportError(
                        f"{path}: the interrupted {command}'s new content is missing, so it "
                        "cannot be finished; nothing was written; reinstall vLLM 0.27.1, "
                        f"remove {intent_path(root)} and run the command again"
                    )
                os.replace(staged, path)
            finished += 1
        _sync_directories(root, paths)
        _remove_leftovers(root, [s["path"] for s in steps if s["after"] is None])
        _drop_staged(root, paths, [])
        _sweep_staged(root)
        _remove_intent(root)
    return f"finished an interrupted {command}: {finished} file(s) completed"


def _sweep_staged(root: Path) -> None:
    """Remove staged files a process killed before writing its record left."""
    directories = {(root / p).parent for p in (*TARGET_FILES, *MODULE_FILES)}
    directories.add(root / "vllm")
    directories.update(p for p in root.glob("vllm-*.dist-info") if p.is_dir())
    for directory in directories:
        if not directory.is_dir() or directory.is_symlink():
            continue
        for staged in directory.glob(f".*{STAGED_SUFFIX}"):
            if staged.is_file() and not staged.is_symlink():
                staged.unlink(missing_ok=True)
