"""Fix: a DFlash or DSpark draft keeps the last block of a prefix-cache hit.

Target: class `Scheduler` in vllm/v1/core/sched/scheduler.py, four hunks.

drop flag
    In `__init__`, right after `self.use_eagle = False`, it sets
    `self.use_eagle_block_drop = False`.
    With the arm's below, that must be all that sets the flag in the
    module: other code that sets it, wherever it stands, is drift.
drop decided by the method
    In `__init__`, the arm `if speculative_config.use_eagle():` (setting
    `self.use_eagle = True` and the lookahead) also sets
    `self.use_eagle_block_drop` to whether the method is neither dflash nor
    dspark. That arm and the default must be all that sets `self.use_eagle`:
    set elsewhere too, it would say "drop" where the flag stays False.
KV cache manager
    The `KVCacheManager(...)` it builds gets `use_eagle=self.use_eagle_block_drop`
    instead of `use_eagle=self.use_eagle`; every other argument as 0.27.1's.
Mamba checkpoint
    In `_mamba_block_aligned_split`, the one-block back-off
    `if self.use_eagle:` becomes `if self.use_eagle_block_drop:`.

Why: with `use_eagle` the KV cache manager drops the last block of every
prefix-cache hit, because an EAGLE draft's KV at a position depends on the
token after it, which the cached block may not match. A DFlash or DSpark
draft builds its KV at a position from the target's hidden state there
alone, so the drop only costs hits: one block of every hit on a
full-attention target, and on hybrid targets, where the Mamba back-off
compounds it, every hit. `self.use_eagle` itself stays as it is: the
prefill lookahead and the computed-token shift still need it.

Where: the scheduler, keyed on the method, as vLLM 0.33.0 has it (there
`SpeculativeConfig.needs_eagle_block_drop()`; 0.27.1's `use_dflash()` and
`use_dspark()` say the same, so `config/speculative.py` needs no edit). A
DFlash1 draft is a dflash draft too, so DFlash1 users keep the block as
well, as upstream's DFlash1 users do from 0.33.0 on. KV-offloading
connectors still drop it for every EAGLE-like method, as 0.27.1 does: they
then find one block fewer than the scheduler, never a wrong one.
Its pull request, #53505, is cited as upstream's history names it; vLLM's
source distributions do not mention it.

Reverted, each statement is 0.27.1's again.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Hunk, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles
from ...framework.names import attribute_setters, setters_besides
from ...framework.in_place import Run, judge_run
from ...framework.source import Found, Source
from ...framework.vocabulary import State

SCHEDULER = "Scheduler"
ATTRIBUTE = "use_eagle_block_drop"
FLAG = f"self.{ATTRIBUTE}"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
FLAG_0271 = HUNKS.shipped("drop flag")

_WHY = (
    "A DFlash or DSpark draft keeps the last block of a prefix-cache hit, as "
    "in vLLM 0.33.0: its draft KV at a position depends on the target's "
    "hidden state alone, so EAGLE's drop only costs hits."
)
FLAG_INIT = HUNKS.hunk(
    "drop flag",
    f"{SCHEDULER}.__init__, right after `{FLAG_0271.strip()}`",
    _WHY,
)
DECIDED = HUNKS.hunk(
    "drop decided by the method",
    f"{SCHEDULER}.__init__, the arm `if speculative_config.use_eagle():`",
    _WHY,
)
MANAGER = HUNKS.hunk(
    "KV cache manager",
    f"{SCHEDULER}.__init__, the `KVCacheManager(...)` it builds",
    _WHY,
)
BACK_OFF = HUNKS.hunk(
    "Mamba checkpoint",
    f"{SCHEDULER}._mamba_block_aligned_split, the one-block back-off",
    _WHY,
)


def _method(cls: Found, name: str) -> Found | Judged:
    return exactly_one(cls.defs(name), f"one method {SCHEDULER}.{name}")


def judge(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(SCHEDULER), f"one module-level class {SCHEDULER}")
    if isinstance(cls, Judged):
        return {h.name: cls for h in (FLAG_INIT, DECIDED, MANAGER, BACK_OFF)}
    init, split = _method(cls, "__init__"), _method(cls, "_mamba_block_aligned_split")

    def run(method: Found | Judged, hunk: Hunk, what: str, deep: bool) -> Judged:
        if isinstance(method, Judged):
            return method
        return judge_run(source, method, hunk, f"{what} in {SCHEDULER}.{method.name}", deep=deep)

    judged = {
        FLAG_INIT.name: run(init, FLAG_INIT, f"`{FLAG_0271.strip()}`", False),
        DECIDED.name: run(init, DECIDED, "the `if speculative_config.use_eagle():` arm", True),
        MANAGER.name: run(init, MANAGER, "the `KVCacheManager(...)` built", False),
        BACK_OFF.name: run(split, BACK_OFF, "the `if self.use_eagle:` back-off", True),
    }
    # The flag is derived where use_eagle is set True; set elsewhere too,
    # use_eagle would say "drop" with the flag left False there.
    eagle_setters = attribute_setters(source.tree, "use_eagle")
    if len(eagle_setters) > 2 and judged[DECIDED.name].state is not State.DRIFT:
        judged[DECIDED.name] = drift(
            "`self.use_eagle` set only by its default and the "
            "`if speculative_config.use_eagle():` arm, as in vLLM 0.27.1, which the "
            f"fix derives `{FLAG}` beside",
            f"{len(eagle_setters)} settings of it, on lines "
            + ", ".join(str(s.lineno) for s in eagle_setters),
        )
    other = _set_otherwise(source, judged)
    if other is not None and judged[FLAG_INIT.name].state is not State.DRIFT:
        judged[FLAG_INIT.name] = drift(
            f"no code in the module but the fix's that sets `{FLAG}`",
            f"{source.describe(other)} on line {other.lineno}, which the fix did not "
            "write; take it out, and the fix sets the flag",
        )
    return judged


def _set_otherwise(source: Source, judged: dict[str, Judged]) -> ast.stmt | None:
    """The first statement that sets the flag and is not the fix's: the
    fix's two settings (the default, the arm's) must be all there is, or
    another decides whether the block is dropped in their stead."""
    owned = []
    for hunk in (FLAG_INIT, DECIDED):
        found = judged[hunk.name]
        if found.state is State.APPLIED:
            assert isinstance(found.site, Run)
            # The run's last statement: the default's line, or the whole arm.
            owned.append(found.site.more[-1] if found.site.more else found.site.path)
    others = setters_besides(source, ATTRIBUTE, owned)
    return others[0] if others else None


PREFIX_BLOCK_DROP = Edit(
    "dflash-prefix-block",
    "vllm/v1/core/sched/scheduler.py",
    "a DFlash or DSpark draft keeps the last block of a prefix-cache hit, "
    "as in vLLM 0.33.0",
    Role.SEAM,
    (FLAG_INIT, DECIDED, MANAGER, BACK_OFF),
    judge,
    writer="dflash_prefix_block:PrefixBlockDrop",
    fix=Fix("#53505", "0.33.0"),
)
