"""The two vLLM modules this tool ships, installed without overwriting anyone's.

A module file is ours when it holds, byte for byte, what this tool ships or
shipped in an earlier version (SHIPPED_BEFORE). Anything else at a module's
path is drift, named and never replaced: upstream's module (0.28.0 and later
ship them, told from the files themselves, which never carry MARKER), a
module someone else wrote, and one of ours changed since it was installed.

A tree that wants its own version of a module says so in the file: KEEP_LINE
among its first lines. Such a file counts as in place; the tool neither
replaces nor removes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from importlib import resources
from pathlib import Path

from ..transforms.framework.vocabulary import State
from ..utils.errors import BackportError
from ..utils.safe_files import read_regular

MARKER = b"# Backported to vLLM 0.27.1 by dflash2-backport."
#: The line that keeps a tree's own version of a module in place.
KEEP_LINE = b"# dflash2-backport: keep"
_HEADER_LINES = 5


@dataclasses.dataclass(frozen=True)
class ShippedModule:
    source: str  # under this package's modules/
    dest: str  # under the target's root, next to vllm/


MODEL = ShippedModule("qwen3_dflash2.py", "vllm/model_executor/models/qwen3_dflash2.py")
PACKAGE = ShippedModule(
    "dflash2/__init__.py", "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py"
)
SPECULATOR = ShippedModule(
    "dflash2/speculator.py", "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
)
SHIPPED = (MODEL, PACKAGE, SPECULATOR)

#: The SHA-256 of every earlier version of a module this tool has shipped, by
#: its source under modules/: a file that holds one of them is an older copy
#: of ours, replaced by `apply` and removed by `revert`. When a module
#: changes, its previous version's digest goes here, before the change is
#: committed (a test holds every version in the repository's history to it).
SHIPPED_BEFORE = {
    "qwen3_dflash2.py": frozenset({
        "81a90bd346b8656031326502a0cad2dc29aa9aa0fcd759695acc478734be42ba",
        "eb483734d2f750171ce1f64d7dcb98136847ab3bfea3d2ef6884189cceb4edb3",
    }),
    "dflash2/__init__.py": frozenset(),
    "dflash2/speculator.py": frozenset({
        "e559aed36b71db61ec61401d336a391c7d5337150ee34059e9290cafb2dc5fd3",
        "caa200ab3cfc6a7a0ede8992519a4065f61d91d22ad31c9687c7a44f307f6542",
        "f7fe7aa27eedc00442d8deb98d72f673e59fc660656419960b61518157c6b878",
        "b3df3712a53738aea9e137cde630010f813142242a55d7969f52c4541b240f63",
    }),
}

_CHANGED = (
    "changed since this tool installed it; to keep this version, add the line "
    f"`{KEEP_LINE.decode()}` to its first {_HEADER_LINES} lines, or remove the file "
    "and run apply again to have this tool's version"
)
_NOT_OURS = (
    "expected no file or ours, found a file this tool did not write; move it away if "
    f"it is not upstream's, or add the line `{KEEP_LINE.decode()}` to its first "
    f"{_HEADER_LINES} lines to keep it"
)
KEPT = f"kept: the file says `{KEEP_LINE.decode()}`"


@dataclasses.dataclass(frozen=True)
class ModulePlan:
    dest: str
    state: State
    content: bytes | None  # what the file should hold; None: no file
    #: What the file holds now (None: no file), as read for the verdict.
    existing: bytes | None = None
    reason: str = ""
    #: The tree keeps its own version (KEEP_LINE): neither written nor removed.
    kept: bool = False


def shipped_source(module: ShippedModule) -> bytes:
    package = resources.files("dflash2_backport.modules")
    try:
        return package.joinpath(module.source).read_bytes()
    except OSError as error:
        raise BackportError(
            f"this dflash2-backport install lacks modules/{module.source} "
            f"({error.strerror}); reinstall dflash2-backport"
        ) from None


def shipped_content(dest: str) -> bytes:
    """What the tool installs at `dest`."""
    return shipped_source(next(module for module in SHIPPED if module.dest == dest))


def _header(data: bytes) -> list[bytes]:
    return [line.rstrip(b"\r") for line in data.split(b"\n", _HEADER_LINES)[:_HEADER_LINES]]


def is_ours(data: bytes) -> bool:
    """Whether the file says this tool wrote it (it may have changed since)."""
    return MARKER in _header(data)


def is_kept(data: bytes) -> bool:
    """Whether the file asks to be kept as it is."""
    return KEEP_LINE in (line.strip() for line in _header(data))


def shipped_before(module: ShippedModule, data: bytes) -> bool:
    return hashlib.sha256(data).hexdigest() in SHIPPED_BEFORE[module.source]


def _read(path: Path) -> bytes | None:
    if path.is_dir() and not path.is_symlink():
        raise BackportError(
            f"{path}: a directory stands where a module file goes; remove it"
        )
    return read_regular(path)


def upstream_ships_dflash2(root: Path) -> bool:
    """Both DFlash2 modules are present and neither is ours."""
    for module in (MODEL, SPECULATOR):
        path = root / module.dest
        if not path.is_file():
            return False
        data = _read(path)
        if data is None or is_ours(data) or is_kept(data):
            return False
    return True


def plan_modules(root: Path) -> list[ModulePlan]:
    plans = []
    for module in SHIPPED:
        content = shipped_source(module)
        path = root / module.dest
        blocked = next(
            (p for p in path.relative_to(root).parents if (root / p).is_file()), None
        )
        if blocked is not None:
            plans.append(
                ModulePlan(
                    module.dest,
                    State.DRIFT,
                    content,
                    reason=f"expected a directory at {blocked}, found a file; remove it",
                )
            )
            continue
        existing = _read(path)
        if existing is None:
            plans.append(ModulePlan(module.dest, State.PENDING, content))
        elif existing == content:
            plans.append(ModulePlan(module.dest, State.APPLIED, content, existing))
        elif is_kept(existing):
            plans.append(
                ModulePlan(module.dest, State.APPLIED, existing, existing, KEPT, kept=True)
            )
        elif shipped_before(module, existing):
            plans.append(
                ModulePlan(
                    module.dest, State.PENDING, content, existing,
                    "replaces an older copy of ours",
                )
            )
        else:
            reason = _CHANGED if is_ours(existing) else _NOT_OURS
            plans.append(ModulePlan(module.dest, State.DRIFT, content, existing, reason))
    return plans


def plan_module_removal(root: Path) -> list[ModulePlan]:
    """Undo `plan_modules`: remove exactly the files this tool installed.

    States read as for the edits: applied is our file still there (to be
    removed), pending is no file of ours (nothing to undo).
    """
    plans = []
    for module in SHIPPED:
        path = root / module.dest
        existing = None if path.parent.is_file() else _read(path)
        if existing is not None and is_kept(existing):
            plans.append(
                ModulePlan(module.dest, State.PENDING, existing, existing, KEPT, kept=True)
            )
        elif existing is not None and (
            existing == shipped_source(module) or shipped_before(module, existing)
        ):
            plans.append(ModulePlan(module.dest, State.APPLIED, None, existing))
        elif existing is not None and is_ours(existing):
            plans.append(
                ModulePlan(
                    module.dest,
                    State.DRIFT,
                    None,
                    existing,
                    "expected the file as this tool installed it, found it changed "
                    "since; remove it by hand if the change is not wanted, or add the "
                    f"line `{KEEP_LINE.decode()}` to its first {_HEADER_LINES} lines "
                    "to keep it",
                )
            )
        else:
            # No file, or upstream's or someone else's: not ours to remove.
            plans.append(ModulePlan(module.dest, State.PENDING, existing, existing))
    return plans
