"""The two vLLM modules this tool ships, installed without overwriting anyone's.

A module file is ours when its header carries MARKER. Upstream's files never
do, so "upstream already ships DFlash2" is told from the files themselves
(0.28.0 and later), and a file we did not write is never replaced: not when
only one of the two modules exists, and not when one exists with other
content.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from .errors import BackportError
from .safe_files import read_regular
from .verdicts import State

MARKER = b"# Backported to vLLM 0.27.1 by dflash2-backport."
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


@dataclasses.dataclass(frozen=True)
class ModulePlan:
    dest: str
    state: State
    content: bytes | None  # what the file should hold; None: no file
    #: What the file holds now (None: no file), as read for the verdict.
    existing: bytes | None = None
    reason: str = ""


def shipped_source(module: ShippedModule) -> bytes:
    package = resources.files("dflash2_backport.modules")
    try:
        return package.joinpath(module.source).read_bytes()
    except OSError as error:
        raise BackportError(
            f"this dflash2-backport install lacks modules/{module.source} "
            f"({error.strerror}); reinstall dflash2-backport"
        ) from None


def is_ours(data: bytes) -> bool:
    return MARKER in data.split(b"\n", _HEADER_LINES)[:_HEADER_LINES]


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
        if data is None or is_ours(data):
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
        elif is_ours(existing):
            plans.append(
                ModulePlan(
                    module.dest, State.PENDING, content, existing,
                    "replaces an older copy of ours",
                )
            )
        else:
            plans.append(
                ModulePlan(
                    module.dest,
                    State.DRIFT,
                    content,
                    existing,
                    "expected no file or ours, found a file this tool did not write; "
                    "move it away if it is not upstream's",
                )
            )
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
        if existing is not None and existing == shipped_source(module):
            plans.append(ModulePlan(module.dest, State.APPLIED, None, existing))
        elif existing is not None and is_ours(existing):
            plans.append(
                ModulePlan(
                    module.dest,
                    State.DRIFT,
                    None,
                    existing,
                    "expected the file as this tool installed it, found it changed "
                    "since; remove it by hand if the change is not wanted",
                )
            )
        else:
            # No file, or upstream's or someone else's: not ours to remove.
            plans.append(ModulePlan(module.dest, State.PENDING, existing, existing))
    return plans
