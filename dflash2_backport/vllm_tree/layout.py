"""Which files the backport touches, and in which order a commit writes them.

The target files come from the edits' declarations (transforms/edits/__init__.py,
`EDITS`); nothing here or in the commit code loads libcst.
"""

from __future__ import annotations

import os.path
import re

from .. import transforms

#: Files whose hunks only add what nothing reaches yet: seams, helpers and
#: hooks. Patched on their own they change no behaviour of vLLM 0.27.1.
SEAMS = transforms.target_files(transforms.Role.SEAM)

#: Files whose hunks lead vLLM to DFlash2: the registry entry, the
#: speculator dispatch and the V2-runner forcing. Each needs the modules and
#: the seams in place before it is switched on.
SWITCHES = transforms.target_files(transforms.Role.SWITCH)

TARGET_FILES = SEAMS + SWITCHES

#: The modules the installer adds, in the order a commit installs them.
MODULE_FILES = (
    "vllm/model_executor/models/qwen3_dflash2.py",
    "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py",
    "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
)


def commit_rank(path: str, revert: bool) -> int:
    """Position of `path` in a commit, so that every prefix of it is a
    working vLLM: applying installs the modules, then the seams, then the
    switches; reverting turns the switches off first and removes the modules
    last. Anything else (vLLM's RECORD) comes after all of them.

    The fixes follow the same rule: a fix whose code calls another's (in a
    switch, calling into a seam) is written after it and taken out before
    it; the engine writes every file that takes edits out first, ranked as a
    revert (engine._changes)."""
    order = MODULE_FILES + SEAMS + SWITCHES
    if revert:
        order = order[::-1]
    return order.index(path) if path in order else len(order)


def hook_files_pattern(files: tuple[str, ...] = TARGET_FILES + MODULE_FILES) -> str:
    """The `files` pattern of the pre-commit hooks: every file the backport
    edits or adds, grouped by directory (.pre-commit-hooks.yaml must say
    this; a test holds it to it)."""
    directories: dict[str, list[str]] = {}
    for path in sorted(files):
        assert path.startswith("vllm/") and path.endswith(".py"), path
        directory, name = os.path.split(path[len("vllm/") : -len(".py")])
        directories.setdefault(re.escape(directory), []).append(re.escape(name))
    alternatives = [
        (f"{directory}/" if directory else "")
        + (names[0] if len(names) == 1 else f"({'|'.join(names)})")
        for directory, names in directories.items()
    ]
    return f"^vllm/({'|'.join(alternatives)})\\.py$"
