"""Which files the backport touches, and in which order a commit writes them.

Kept free of libcst: the commit, the lock and the safety checks need the
list of files before (or without) any codemod is loaded.
"""

from __future__ import annotations

#: Files whose hunks only add what nothing reaches yet: seams, helpers and
#: hooks. Patched on their own they change no behaviour of vLLM 0.27.1.
SEAMS = (
    "vllm/model_executor/models/qwen3_dflash.py",
    "vllm/model_executor/layers/logits_processor.py",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
)

#: Files whose hunks lead vLLM to DFlash2: the registry entry, the
#: speculator dispatch and the V2-runner forcing. Each needs the modules and
#: the seams in place before it is switched on.
SWITCHES = (
    "vllm/model_executor/models/registry.py",
    "vllm/v1/worker/gpu/spec_decode/__init__.py",
    "vllm/config/vllm.py",
)

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
    last. Anything else (vLLM's RECORD) comes after all of them."""
    order = MODULE_FILES + SEAMS + SWITCHES
    if revert:
        order = order[::-1]
    return order.index(path) if path in order else len(order)
