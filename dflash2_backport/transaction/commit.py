"""Write a plan so that no crash, signal or concurrent edit leaves a torn tree.

The way dpkg unpacks a package, in three steps:

1. **Intent.** A record of every file to replace, create or remove, with
   the SHA-256 of its content before and after, is written to
   `vllm/.dflash2-backport-intent.json` in phase "staging". It carries a
   random nonce of the run's own.
2. **Staging.** Every new content goes to `.NAME.NONCE.dflash2-backport-new`
   beside its file, created afresh (never over anything already there),
   fsynced, with the owner and mode the file will keep. A name that carries
   the nonce is the run's by construction: recovery removes what stands
   there, whatever a kill left half-written, and nothing else. Then every
   file is compared with the bytes the plan was made from; a difference
   (someone edited it meanwhile) stops the commit here, and the staged
   files are removed: nothing was written.
3. **Commit.** The record moves to phase "committing", and each file is
   compared once more and then renamed into place (or removed), in the
   order of `layout.commit_rank`: any prefix of it is a working vLLM.
   The record is removed last. A run acts on its record (drops it, rolls
   back, removes it) only while the record on disk is still the one it
   wrote: one that another run has replaced means that run took the commit
   over, and what is on disk is then no longer this run's to undo.

Every file is reached through descriptors of its directories opened
without following links (`safe_files.Tree`), so a directory swapped for a
link during the run changes nothing of what is written. A process killed at
any point leaves the record behind; `recovery` checks it and finishes or
drops the commit before anything else is planned.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import hashlib
import json
import os
import re
import secrets
import shlex
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import __version__
from ..utils import interrupts
from ..utils.errors import READ_ONLY_MOUNT_REMEDY, BackportError, Interrupted
from ..utils.safe_files import STAGED_SUFFIX, Tree, read_regular
from .owned import Owned

INTENT = "vllm/.dflash2-backport-intent.json"
#: The record's first key. It also marks the record's own staged copy as
#: the tool's, so that a copy left by a kill can be told from a planted file.
FORMAT = "dflash2-backport intent 3"
#: Records of earlier versions of the tool, still finished or dropped: the
#: second format had no nonce and no edit set, the first not even a format.
_EARLIER_FORMATS = ("dflash2-backport intent 2",)
_SIGNATURE = b'{\n "format": "dflash2-backport intent '
#: No record of this tool's comes near this size.
_RECORD_LIMIT = 1 << 20
_DIGEST = re.compile(r"[0-9a-f]{64}")
_NONCE = re.compile(r"[0-9a-f]{16}")
_EDIT_SETS = ("all", "pr", "none")


@dataclasses.dataclass(frozen=True)
class Change:
    path: str  # relative to the target's root
    before: bytes | None  # what the plan was made from; None: no file
    after: bytes | None  # what the commit leaves; None: the file is removed


class Phase(str, enum.Enum):
    STAGING = "staging"  # nothing renamed yet: dropping the commit undoes it
    COMMITTING = "committing"  # files are being renamed: only finishing it is whole


@dataclasses.dataclass(frozen=True)
class Step:
    path: str
    before: str | None  # SHA-256 of the content before; None: no file
    after: str | None  # SHA-256 of the content after; None: no file


@dataclasses.dataclass(frozen=True)
class Intent:
    command: str
    phase: Phase
    steps: tuple[Step, ...]
    #: Directories the commit creates, parents first.
    directories: tuple[str, ...]
    pid: int
    tool: str | None = None
    #: The edits the command leaves in the tree ("all", "pr", "none"), so
    #: that the hint to finish it repeats the command as it was given.
    #: None in the records of earlier versions.
    edit_set: str | None = None
    #: Marks this run's staged files. None in the records of earlier
    #: versions, whose staged files had no mark.
    nonce: str | None = None

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "tool": self.tool,
                "command": self.command,
                "edit_set": self.edit_set,
                "phase": self.phase.value,
                "pid": self.pid,
                "nonce": self.nonce,
                "directories": list(self.directories),
                "steps": [dataclasses.asdict(step) for step in self.steps],
            },
            indent=1,
        ).encode()

    def staged(self, relative: str) -> str:
        """Where this commit stages the next content of `relative`."""
        return staged_name(relative, self.nonce)


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def staged_name(relative: str, nonce: str | None = None) -> str:
    """The staged name of `relative`: with a run's nonce, that run's alone;
    without one, the record's own copy (or a staged file of an earlier
    version of the tool)."""
    directory, _, name = relative.rpartition("/")
    staged = f".{name}.{nonce}{STAGED_SUFFIX}" if nonce else f".{name}{STAGED_SUFFIX}"
    return f"{directory}/{staged}" if directory else staged


def intent_path(root: Path) -> Path:
    return root / INTENT


# -- the commit -----------------------------------------------------------------


def commit(root: Path, command: str, changes: Sequence[Change], edit_set: str) -> list[str]:
    """Write `changes` (already in commit order) all or not at all.
    `edit_set` names the edits the command leaves ("all", "pr", "none")."""
    if not changes:
        return []
    paths = [c.path for c in changes]
    with Tree(root) as tree:
        _check_writable(root, changes)
        _check_bytecode(root, changes)
        intent = Intent(
            command,
            Phase.STAGING,
            tuple(Step(c.path, digest(c.before), digest(c.after)) for c in changes),
            _missing_directories(tree, changes),
            os.getpid(),
            __version__,
            edit_set,
            secrets.token_hex(8),
        )
        package = tree.lstat("vllm/__init__.py")
        new_file_mode = stat.S_IMODE(package.st_mode) if package else 0o644
        try:
            _Commit(tree, intent, changes, new_file_mode).run()
        except Interrupted as interruption:
            if interruption.after_commit:
                interruption.written = paths
            raise
    return paths


@dataclasses.dataclass
class _Commit:
    tree: Tree
    intent: Intent
    changes: Sequence[Change]
    new_file_mode: int
    #: Staged files this run created, so that only they are ever removed.
    staged: list[str] = dataclasses.field(default_factory=list)
    originals: dict[str, os.stat_result | None] = dataclasses.field(default_factory=dict)
    #: The record as this run last wrote it; None before it has written one.
    record: bytes | None = None

    def run(self) -> None:
        with interrupts.held_during_commit():
            try:
                self._write_record(Phase.STAGING)
                _make_directories(self.tree, self.intent.directories)
                for change in self.changes:
                    self.originals[change.path] = (
                        self.tree.lstat(change.path) if change.before is not None else None
                    )
                    if change.after is not None:
                        self._stage(change.path, change.after)
                for change in self.changes:
                    _compare(self.tree, change)
                self._write_record(Phase.COMMITTING)
            except _Changed as changed:
                self._drop()
                raise changed.refusal(written=False, kept=()) from None
            except BaseException:
                self._drop()
                raise
            done: list[Change] = []
            try:
                for change in self.changes:
                    _compare(self.tree, change)
                    self._put_in_place(change)
                    done.append(change)
            except (_Changed, BackportError, OSError) as error:
                if not self._record_is_ours():
                    self._remove_staged()
                    raise _taken_over(self.tree.root, error, done) from None
                kept = self._roll_back(done)
                self._drop()
                if isinstance(error, _Changed):
                    raise error.refusal(written=True, kept=kept) from None
                raise _failed_write(self.tree.root, error, kept) from None
            _sync_directories(self.tree, [c.path for c in self.changes])
            # Stale bytecode of a removed module is never imported without
            # its source, so a failure to remove it costs nothing but space.
            try:
                remove_bytecode(self.tree, [c.path for c in self.changes if c.after is None])
            except (BackportError, OSError):
                pass
            if self._record_is_ours():
                remove_intent(self.tree)

    def _write_record(self, phase: Phase) -> None:
        if self.record is not None and not self._record_is_ours():
            raise _taken_over(self.tree.root, None, ())
        intent = dataclasses.replace(self.intent, phase=phase)
        write_intent(self.tree, intent)
        self.record = intent.encode()

    def _record_is_ours(self) -> bool:
        try:
            return self.record is not None and self.tree.read(
                INTENT, limit=_RECORD_LIMIT
            ) == self.record
        except (BackportError, OSError):
            return False

    def _stage(self, relative: str, data: bytes) -> None:
        original = self.originals[relative]
        owner = original if original is not None else os.fstat(self.tree.parent_of(relative)[0])
        mode = stat.S_IMODE(original.st_mode) if original is not None else self.new_file_mode
        # stage() removes what it created when it fails; what a kill leaves
        # carries this run's nonce in its name, and recovery removes it.
        stage(self.tree, relative, data, owner, mode, self.intent.nonce)
        self.staged.append(relative)

    def _put_in_place(self, change: Change) -> None:
        _put_in_place(self.tree, change, self.intent.nonce)
        if change.after is not None:
            self.staged.remove(change.path)

    def _remove_staged(self) -> None:
        for relative in self.staged:
            directory, name = self.tree.parent_of(self.intent.staged(relative))
            try:
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                pass
        self.staged.clear()

    def _drop(self) -> None:
        """Undo a commit that renamed nothing: its staged files, the
        directories it made, and its record, while that is still its own."""
        self._remove_staged()
        if self.record is None or not self._record_is_ours():
            return  # before this run's record, or after another run's took its place
        for relative in reversed(self.intent.directories):
            _remove_empty_directory(self.tree, relative)
        remove_intent(self.tree)

    def _roll_back(self, done: list[Change]) -> tuple[str, ...]:
        """Put back what this commit replaced, newest first, and return the
        files it could not: each was rewritten after this run wrote it (by
        someone else: theirs now, not ours to undo), or its staged name was
        taken meanwhile. Called only while this run's record is still the
        one on disk, so no other run has committed over these files."""
        kept = []
        for change in reversed(done):
            try:
                if self.tree.read(change.path) != change.after:
                    kept.append(change.path)
                    continue
                if change.before is None:
                    directory, name = self.tree.parent_of(change.path)
                    with self.tree.naming(change.path):
                        os.unlink(name, dir_fd=directory)
                else:
                    self._stage(change.path, change.before)
                    self._put_in_place(Change(change.path, change.after, change.before))
            except (BackportError, OSError):
                kept.append(change.path)
        return tuple(reversed(kept))


_GIVE_WRITE_ACCESS = (
    "give this user write access to it (or run as its owner), then run the command again"
)


def _on_read_only_mount(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _check_writable(root: Path, changes: Iterable[Change]) -> None:
    # A file its owner made read-only is refused, as before any write; the
    # rename itself would only need the directory to be writable.
    for change in changes:
        path = root / change.path
        directory = path.parent
        while not directory.exists():
            directory = directory.parent
        if _on_read_only_mount(directory):
            raise BackportError(
                f"{directory}: on a file system mounted read-only; nothing was written; "
                f"{READ_ONLY_MOUNT_REMEDY}"
            )
        if change.before is not None and not os.access(path, os.W_OK):
            raise BackportError(f"{path}: read-only; nothing was written; {_GIVE_WRITE_ACCESS}")
        if not os.access(directory, os.W_OK):
            raise BackportError(
                f"{directory}: directory is read-only; nothing was written; {_GIVE_WRITE_ACCESS}"
            )


def _unchecked_bytecode(path: Path) -> Path | None:
    """Bytecode of `path` compiled as unchecked-hash (`compileall
    --invalidation-mode unchecked-hash`, as reproducible image builds do):
    Python runs it without looking at the source, so an edit of the source
    would not take effect."""
    try:
        candidates = sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
    except OSError:
        return None
    for pyc in candidates:
        try:
            # No link followed, no FIFO opened: a __pycache__ entry may be either.
            header = (read_regular(pyc) or b"")[:8]
        except (BackportError, OSError):
            continue
        # The header's flags: bit 0 hash-based, bit 1 check the source.
        if len(header) == 8 and int.from_bytes(header[4:8], "little") & 0b11 == 0b01:
            return pyc
    return None


def _check_bytecode(root: Path, changes: Iterable[Change]) -> None:
    for change in changes:
        path = root / change.path
        if path.suffix != ".py" or change.before is None or change.after is None:
            continue
        pyc = _unchecked_bytecode(path)
        if pyc is not None:
            raise BackportError(
                f"{pyc}: unchecked-hash bytecode, which Python runs without reading "
                f"{path.name}, so the change would not take effect; nothing was written; "
                "remove it (or vLLM's __pycache__ directories), run the command again, "
                "and compile afresh afterwards if the image needs it"
            )


class _Changed(Exception):
    """A file no longer holds the bytes the plan was made from."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def refusal(self, written: bool, kept: tuple[str, ...]) -> BackportError:
        if not written:
            return BackportError(
                f"{self.path}: changed since it was read (another program wrote it while "
                "this one was planning); nothing was written and the change was kept; "
                "run the command again"
            )
        what = (
            f"{self.path}: changed since it was read (another program wrote it during the "
            "commit); the change was kept, and "
        )
        if not kept:
            return BackportError(
                what + "every file this run had replaced was put back, so nothing was "
                "written; run the command again"
            )
        return BackportError(what + _not_put_back(kept))


def _not_put_back(kept: tuple[str, ...]) -> str:
    one = len(kept) == 1
    return (
        "the files this run had replaced were put back except "
        + ", ".join(kept)
        + ", which another program changed after this run wrote "
        + ("it: it holds" if one else "them: they hold")
        + " this tool's edits and that program's changes; compare "
        + ("it" if one else "them")
        + " with vLLM 0.27.1, then run the command again"
    )


def _taken_over(
    root: Path, error: BaseException | None, done: Sequence[Change]
) -> BackportError:
    """This run's record was replaced while it committed: another run has
    taken the commit over, and has finished it or is finishing it."""
    cause = ""
    if isinstance(error, OSError):
        cause = f" ({error.filename or root}: {error.strerror})"
    elif error is not None:
        cause = f" ({error})"
    return BackportError(
        f"{root / INTENT}: no longer the record this run wrote{cause}: another "
        "dflash2-backport run took the commit over after "
        f"{len(done)} of this run's files were in place, so nothing was undone; run "
        "`dflash2-backport check` on this target once no other run is at work"
    )


def _failed_write(root: Path, error: BaseException, kept: tuple[str, ...]) -> BackportError:
    if isinstance(error, BackportError):
        where = str(error).split("; nothing was written")[0]
    else:
        where = f"{error.filename or root}: write failed ({error.strerror})"
    if not kept:
        return BackportError(f"{where}; every file was restored, so nothing was written")
    return BackportError(f"{where}; " + _not_put_back(kept))


def _compare(tree: Tree, change: Change) -> None:
    if tree.read(change.path) != change.before:
        raise _Changed(tree.root / change.path)


def _missing_directories(tree: Tree, changes: Iterable[Change]) -> tuple[str, ...]:
    missing: list[str] = []
    for change in changes:
        if change.after is None:
            continue
        directory = change.path.rpartition("/")[0]
        chain = []
        while tree.directory(directory) is None:
            chain.append(directory)
            directory = directory.rpartition("/")[0]
        for relative in reversed(chain):
            if relative not in missing:
                missing.append(relative)
    return tuple(missing)


def _make_directories(tree: Tree, directories: Iterable[str]) -> None:
    # A new directory takes the owner, group and mode of the one it goes into.
    for relative in directories:
        parent, name = tree.parent_of(relative)
        info = os.fstat(parent)
        with tree.naming(relative):
            os.mkdir(name, 0o700, dir_fd=parent)
        descriptor = tree.directory(relative)
        os.fchmod(descriptor, stat.S_IMODE(info.st_mode))
        _chown_like(tree.root / relative, descriptor, info)


def _remove_empty_directory(tree: Tree, relative: str) -> None:
    parent, name = tree.parent_of(relative)
    if parent is None:
        return
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass  # not empty: something else lives there now


def stage(
    tree: Tree,
    relative: str,
    data: bytes,
    owner: os.stat_result,
    mode: int,
    nonce: str | None = None,
) -> None:
    """Write `data` to a new file beside `relative`, owned like `owner`, with
    `mode` and the extended attributes of the file it replaces, if any, and
    fsync it. Never opened over anything already there."""
    staged = staged_name(relative, nonce)
    directory, name = tree.parent_of(staged)
    try:
        descriptor = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=directory,
        )
    except FileExistsError:
        raise BackportError(
            f"{tree.root / staged}: a file this run did not stage stands "
            "where it stages its next version of "
            f"{Path(relative).name}; nothing was written; if it is not yours, remove it "
            "and run the command again"
        ) from None
    except OSError as error:
        raise _not_staged(tree.root / relative, error) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
        _chown_like(tree.root / relative, descriptor, owner)
        os.fchmod(descriptor, mode)
        _copy_extended_attributes(tree, relative, descriptor)
        os.fsync(descriptor)
    except BaseException as error:
        # Created here, so ours to remove: a full disk leaves no half file.
        os.unlink(name, dir_fd=directory)
        if isinstance(error, OSError):
            raise _not_staged(tree.root / relative, error) from None
        raise
    finally:
        os.close(descriptor)


def _copy_extended_attributes(tree: Tree, relative: str, descriptor: int) -> None:
    """The replaced file's extended attributes, onto its new version: its
    access control list above all, whose loss would hand the owning group
    the mask's permissions and take away those of the users it names. A
    file the commit creates has none to carry (the kernel gives it the
    directory's default list)."""
    directory, name = tree.parent_of(relative)
    try:
        source = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
    except FileNotFoundError:
        return
    try:
        try:
            names = os.listxattr(source)
        except OSError as error:
            if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                return  # a file system without them
            raise
        for attribute in names:
            value = os.getxattr(source, attribute)
            try:
                os.setxattr(descriptor, attribute, value)
            except OSError as error:
                if attribute.startswith("system."):
                    raise BackportError(
                        f"{tree.root / relative}: its {attribute} could not be carried over "
                        f"to its new version ({error.strerror}); nothing was written; run "
                        "as its owner or as root"
                    ) from None
                # security.* and trusted.* need privileges this user lacks;
                # the new file has what the kernel and the policy give it.
    finally:
        os.close(source)


#: What frees a write that failed for want of room.
_REMEDIES = {
    errno.ENOSPC: "free space on its file system",
    errno.EDQUOT: "free space within your disk quota",
}


def _not_staged(path: Path, error: OSError) -> BackportError:
    """The file named as the user knows it, not by the staged copy's name,
    which is gone by the time they read this."""
    remedy = _REMEDIES.get(error.errno or 0)
    return BackportError(
        f"{path}: could not be written ({error.strerror}); nothing was written"
        + (f"; {remedy}, then run the command again" if remedy else "")
    )


def _chown_like(path: Path, descriptor: int, reference: os.stat_result) -> None:
    mine = os.fstat(descriptor)
    if (mine.st_uid, mine.st_gid) == (reference.st_uid, reference.st_gid):
        return
    try:
        os.fchown(descriptor, reference.st_uid, reference.st_gid)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        raise BackportError(
            f"{path}: owned by uid {reference.st_uid} gid {reference.st_gid}, and replacing "
            "it as this user would change that; nothing was written; run as its owner "
            "or as root"
        ) from None


def _put_in_place(tree: Tree, change: Change, nonce: str) -> None:
    directory, name = tree.parent_of(change.path)
    with tree.naming(change.path):
        if change.after is None:
            os.unlink(name, dir_fd=directory)
        else:
            staged = staged_name(change.path, nonce).rpartition("/")[2]
            os.replace(staged, name, src_dir_fd=directory, dst_dir_fd=directory)


def _sync_directories(tree: Tree, paths: Iterable[str]) -> None:
    for directory in sorted({p.rpartition("/")[0] for p in paths}):
        descriptor = tree.directory(directory)
        if descriptor is not None:
            _fsync(descriptor)


def _fsync(descriptor: int) -> None:
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename stands


def remove_bytecode(tree: Tree, removed: Iterable[str]) -> None:
    """Bytecode of removed modules, and their package directory once empty.
    Names are matched against the module's own, never as a pattern."""
    for relative in removed:
        directory = relative.rpartition("/")[0]
        stem = relative.rpartition("/")[2].removesuffix(".py")
        cache = f"{directory}/__pycache__"
        info = tree.lstat(cache)
        # Anything but a plain directory there holds no bytecode of ours.
        descriptor = tree.directory(cache) if info and stat.S_ISDIR(info.st_mode) else None
        if descriptor is not None:
            for name in os.listdir(descriptor):
                if name.startswith(f"{stem}.") and name.endswith(".pyc"):
                    info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        os.unlink(name, dir_fd=descriptor)
            _remove_empty_directory(tree, cache)
        if directory not in Owned().directories:
            continue  # only the package directory the tool created goes with it
        if not any(m.startswith(f"{directory}/") and tree.lstat(m) for m in Owned().files):
            _remove_empty_directory(tree, directory)


# -- the intent record -------------------------------------------------------------


def write_intent(tree: Tree, intent: Intent) -> None:
    directory, name = tree.parent_of(INTENT)
    temporary = staged_name(INTENT)
    if tree.lstat(temporary) is not None:
        drop_stale_record_copy(tree)
    package = os.fstat(directory)
    stage(tree, INTENT, intent.encode(), package, 0o644)
    with tree.naming(INTENT):
        os.replace(
            temporary.rpartition("/")[2], name, src_dir_fd=directory, dst_dir_fd=directory
        )
    _fsync(directory)


def remove_intent(tree: Tree) -> None:
    directory, name = tree.parent_of(INTENT)
    try:
        with tree.naming(INTENT):
            os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        return
    _fsync(directory)


def drop_stale_record_copy(tree: Tree) -> None:
    """The record's staged copy, left by a process killed while writing the
    record: removed only when it carries the record's signature (or is a
    prefix of it, as a write cut short leaves). Anything else at that name
    is left, and writing the record then refuses, naming it."""
    temporary = staged_name(INTENT)
    info = tree.lstat(temporary)
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return
    data = tree.read(temporary, limit=_RECORD_LIMIT)
    if data is not None and (data.startswith(_SIGNATURE) or _SIGNATURE.startswith(data)):
        directory, name = tree.parent_of(temporary)
        with tree.naming(temporary):
            os.unlink(name, dir_fd=directory)


def read_intent(tree: Tree, owned: Owned) -> Intent | None:
    """The record an interrupted commit left, checked as a claim: None when
    there is none; refused, naming the record, when it is not one this tool
    could have written for this tree."""
    data = tree.read(INTENT, limit=_RECORD_LIMIT)
    if data is None:
        return None
    return _decode(data, owned, tree.root / INTENT)


def _decode(data: bytes, owned: Owned, where: Path) -> Intent:
    def refuse(reason: str) -> BackportError:
        return BackportError(
            f"{where}: not a record this tool wrote ({reason}); nothing was "
            "touched; if no dflash2-backport run was interrupted on this tree, or vLLM was "
            "reinstalled since one was, remove the file, then run the command again"
        )

    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise refuse("not JSON") from None
    if not isinstance(raw, dict):
        raise refuse("not a JSON object")
    # Records of the first format lack the two keys that name the format
    # and the tool; everything else is checked the same way.
    current = raw.get("format") == FORMAT
    if not current and raw.get("format", _EARLIER_FORMATS[0]) not in _EARLIER_FORMATS:
        raise refuse(f"format {raw.get('format')!r}")
    known = {"format", "tool", "command", "phase", "pid", "directories", "steps"}
    if current:
        known |= {"edit_set", "nonce"}
    if set(raw) - known:
        raise refuse(f"unknown keys {sorted(set(raw) - known)}")
    command, phase = raw.get("command"), raw.get("phase")
    if command not in ("apply", "revert"):
        raise refuse(f"command {command!r}")
    edit_set, nonce = raw.get("edit_set"), raw.get("nonce")
    if current:
        if not (isinstance(nonce, str) and _NONCE.fullmatch(nonce)):
            raise refuse(f"nonce {nonce!r}")
        if edit_set not in _EDIT_SETS or (edit_set == "none") != (command == "revert"):
            raise refuse(f"edit set {edit_set!r} for {command}")
    if phase not in {p.value for p in Phase}:
        raise refuse(f"phase {phase!r}")
    if not isinstance(raw.get("pid"), int) or isinstance(raw.get("pid"), bool):
        raise refuse("no pid")
    tool = raw.get("tool")
    if tool is not None and not isinstance(tool, str):
        raise refuse("tool version not a string")
    directories = raw.get("directories")
    if not isinstance(directories, list) or any(
        d not in owned.directories for d in directories
    ):
        raise refuse(f"directories {directories!r} are not ones this tool creates")
    if directories and command != "apply":
        raise refuse("a revert creates no directory")
    steps = raw.get("steps")
    if not isinstance(steps, list):
        raise refuse("no steps")
    parsed: list[Step] = []
    for step in steps:
        if not isinstance(step, dict) or set(step) != {"path", "before", "after"}:
            raise refuse(f"step {step!r}")
        path, before, after = step["path"], step["before"], step["after"]
        if path not in owned.files:
            raise refuse(f"path {path!r} is not one of the files this tool writes")
        if any(p.path == path for p in parsed):
            raise refuse(f"path {path!r} twice")
        for value in (before, after):
            if value is not None and not (isinstance(value, str) and _DIGEST.fullmatch(value)):
                raise refuse(f"{path}: {value!r} is not a SHA-256")
        if before is None and after is None:
            raise refuse(f"{path}: neither a content before nor after")
        if before is None and (command != "apply" or not owned.may_be_absent(path)):
            raise refuse(f"{path}: created, which only an apply does to a module")
        if after is None and (command != "revert" or not owned.may_be_absent(path)):
            raise refuse(f"{path}: removed, which only a revert does to a module")
        parsed.append(Step(path, before, after))
    return Intent(
        command, Phase(phase), tuple(parsed), tuple(directories), raw["pid"], tool,
        edit_set, nonce,
    )


def interrupted_command(intent: Intent) -> str:
    """The interrupted command as it was given, less its target options."""
    return "apply --only-pr" if intent.edit_set == "pr" else intent.command


def interrupted_message(root: Path, intent: Intent, options: Sequence[str] = ()) -> str:
    command = interrupted_command(intent)
    # Quoted as a shell reads it: the hint is there to be pasted.
    again = shlex.join(["dflash2-backport", *command.split(), *options])
    return (
        f"{root}: a `dflash2-backport {command}` was interrupted while writing "
        f"(record {Path(INTENT).name} in vllm/); run `{again}` to finish it"
    )
