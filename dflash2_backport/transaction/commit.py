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
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import __version__
from ..utils import interrupts
from ..utils.errors import BackportError, Interrupted
from ..utils.safe_files import Tree
from .intent import (
    INTENT,
    RECORD_LIMIT,
    Intent,
    Phase,
    Step,
    digest,
    remove_intent,
    write_intent,
)
from .staging import (
    make_directories,
    remove_bytecode,
    remove_empty_directory,
    stage,
    staged_name,
    sync_directories,
)
from .writable import check_bytecode, check_writable


@dataclasses.dataclass(frozen=True)
class Change:
    path: str  # relative to the target's root
    before: bytes | None  # what the plan was made from; None: no file
    after: bytes | None  # what the commit leaves; None: the file is removed


def commit(root: Path, command: str, changes: Sequence[Change], edit_set: str) -> list[str]:
    """Write `changes` (already in commit order) all or not at all.
    `edit_set` names the edits the command leaves ("all", "pr", "none")."""
    if not changes:
        return []
    paths = [c.path for c in changes]
    with Tree(root) as tree:
        check_writable(root, changes)
        check_bytecode(root, changes)
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
                make_directories(self.tree, self.intent.directories)
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
            sync_directories(self.tree, [c.path for c in self.changes])
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
                INTENT, limit=RECORD_LIMIT
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
            remove_empty_directory(self.tree, relative)
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


def _put_in_place(tree: Tree, change: Change, nonce: str) -> None:
    directory, name = tree.parent_of(change.path)
    with tree.naming(change.path):
        if change.after is None:
            os.unlink(name, dir_fd=directory)
        else:
            staged = staged_name(change.path, nonce).rpartition("/")[2]
            os.replace(staged, name, src_dir_fd=directory, dst_dir_fd=directory)
