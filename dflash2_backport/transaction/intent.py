"""The intent record: what a commit is about to do, written before it
touches any file, so that a run killed part-way can be finished or dropped.

`vllm/.dflash2-backport-intent.json` names every file to replace, create or
remove, with the SHA-256 of its content before and after, the phase the
commit is in and a random nonce that marks the run's staged files. It lives
where anyone who can write the tree can forge one, so reading it checks it
as a claim (`read_intent`): its shape one this tool writes, its paths files
this tool owns in this tree. Records of earlier versions of the tool are
still read, finished and dropped.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import re
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

from ..utils.errors import BackportError
from ..utils.safe_files import Tree
from .owned import Owned
from .staging import fsync, stage, staged_name


INTENT = "vllm/.dflash2-backport-intent.json"
#: The record's first key. It also marks the record's own staged copy as
#: the tool's, so that a copy left by a kill can be told from a planted file.
FORMAT = "dflash2-backport intent 3"
#: Records of earlier versions of the tool, still finished or dropped: the
#: second format had no nonce and no edit set, the first not even a format.
_EARLIER_FORMATS = ("dflash2-backport intent 2",)
_SIGNATURE = b'{\n "format": "dflash2-backport intent '
#: No record of this tool's comes near this size.
RECORD_LIMIT = 1 << 20
_DIGEST = re.compile(r"[0-9a-f]{64}")
_NONCE = re.compile(r"[0-9a-f]{16}")
_EDIT_SETS = ("all", "pr", "none")


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


def intent_path(root: Path) -> Path:
    return root / INTENT


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
    fsync(directory)


def remove_intent(tree: Tree) -> None:
    directory, name = tree.parent_of(INTENT)
    try:
        with tree.naming(INTENT):
            os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        return
    fsync(directory)


def drop_stale_record_copy(tree: Tree) -> None:
    """The record's staged copy, left by a process killed while writing the
    record: removed only when it carries the record's signature (or is a
    prefix of it, as a write cut short leaves). Anything else at that name
    is left, and writing the record then refuses, naming it."""
    temporary = staged_name(INTENT)
    info = tree.lstat(temporary)
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return
    data = tree.read(temporary, limit=RECORD_LIMIT)
    if data is not None and (data.startswith(_SIGNATURE) or _SIGNATURE.startswith(data)):
        directory, name = tree.parent_of(temporary)
        with tree.naming(temporary):
            os.unlink(name, dir_fd=directory)


def read_intent(tree: Tree, owned: Owned) -> Intent | None:
    """The record an interrupted commit left, checked as a claim: None when
    there is none; refused, naming the record, when it is not one this tool
    could have written for this tree."""
    data = tree.read(INTENT, limit=RECORD_LIMIT)
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
