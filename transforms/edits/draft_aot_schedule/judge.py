"""Fix: FlashAttention's ahead-of-time split schedule is off for a
sliding-window draft's attention groups.

Target: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py, two hunks.

import
    Must be there: `from vllm.v1.kv_cache_interface import KVCacheConfig`.
    Becomes `from vllm.v1.kv_cache_interface import (KVCacheConfig,
    get_kv_cache_spec_sliding_window)`, or gets that import on a line of its
    own after it where the module imports one name a line (isort's
    force-single-line). Applied too when the module already
    imports `get_kv_cache_spec_sliding_window` from there some other way
    (then there is nothing to add, and nothing to take back).
loop
    In `DFlashSpeculator.set_attn`, right after its call of
    `super().set_attn(model_state, kv_cache_config, block_tables,
    target_input_buffers, target_attn_groups)`, it inserts a loop over the
    draft's attention groups that turns `aot_schedule` off on every metadata
    builder that has it on and serves a sliding-window KV-cache spec. It
    must be all that sets `aot_schedule` in the module: other code that
    sets it, wherever it stands, is drift.

Why: 0.27.1's FlashAttention builder keeps FA3's AOT schedule on when the
windowed drafter is the only FlashAttention user, or shares its window with
every other one, and the schedule is wrong for a windowed drafter:
acceptance collapses to one token, or FlashAttention's combine kernel
faults. Whether it stays on depends on which other layers run
FlashAttention, so it is decided here, once, for the draft's groups.
Full-attention groups, and builders without the flag (Triton, FlashInfer),
are left alone.

Where: in `DFlashSpeculator.set_attn`, as upstream has it (the change landed
in vLLM 0.30.0, in `set_attn`; the issue's `load_draft_model` is unchanged
there). DFlash1, DSpark and DFlash2 all inherit it, so a DFlash1 or DSpark
draft with sliding-window layers gets the AOT schedule off for those groups:
the state 0.27.1's builder already reaches by itself whenever another
FlashAttention layer has another window, with FA3's own split heuristics.
Its pull request, #54374, is cited as upstream's history names it; vLLM's
source distributions do not mention it.

Reverted, the loop goes and the import is 0.27.1's again; if other code in
the module reads the name, that is drift: removing the import would break it.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Judged, Role, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles
from ...framework.judging import kept_while_used
from ...framework.meaning import same_meaning
from ...framework.names import Readers, module_bindings, one_name_a_line, origin_words, setters_besides
from ...framework.in_place import Run, judge_run, judge_run_as, run_site
from ...framework.source import Source
from ...framework.vocabulary import State

SPECULATOR = "DFlashSpeculator"
METHOD = "set_attn"
NAME = "get_kv_cache_spec_sliding_window"
ORIGIN = f"vllm.v1.kv_cache_interface.{NAME}"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
IMPORT_0271 = HUNKS.shipped("import get_kv_cache_spec_sliding_window")
IMPORT_FIXED = HUNKS.patched("import get_kv_cache_spec_sliding_window")
# The fix's import where the module imports one name a line.
IMPORT_ONE_A_LINE = IMPORT_0271 + f"from vllm.v1.kv_cache_interface import {NAME}\n"
SUPER_CALL = HUNKS.shipped("AOT schedule off for sliding-window draft groups")
#: The loop the fix writes right after the call.
LOOP = HUNKS.patched("AOT schedule off for sliding-window draft groups").removeprefix(SUPER_CALL)

_WHY = (
    "FA3's ahead-of-time split schedule is turned off for the draft's "
    "sliding-window attention groups, as in vLLM 0.30.0: left on, a windowed "
    "drafter's acceptance collapses or the combine kernel faults."
)
IMPORT = HUNKS.hunk(
    "import get_kv_cache_spec_sliding_window",
    "module level, the import of KVCacheConfig from vllm.v1.kv_cache_interface",
    _WHY,
)
AOT_OFF = HUNKS.hunk(
    "AOT schedule off for sliding-window draft groups",
    f"{SPECULATOR}.{METHOD}, right after its `super().{METHOD}(...)` call",
    _WHY,
)


def judge(source: Source) -> dict[str, Judged]:
    return {IMPORT.name: _import(source), AOT_OFF.name: _loop(source)}


def _import(source: Source) -> Judged:
    statements = source.module.statements()
    ours = [s for s in statements if same_meaning(s.node, IMPORT.after)]
    if len(ours) == 1:
        return applied(run_site(ours))
    # In a module of one name a line, the name on its own line after
    # KVCacheConfig's is the fix's; elsewhere, the module's own words.
    one_a_line = (
        judge_run_as(source, source.module, IMPORT_0271, IMPORT_ONE_A_LINE)
        if one_name_a_line(source.tree)
        else None
    )
    if one_a_line is not None and one_a_line.state is State.APPLIED:
        return one_a_line
    origins = module_bindings(source.tree.body).get(NAME, [])
    if origins and all(origin == ORIGIN for origin in origins):
        # The module imports it already, in its own words: nothing to add.
        return applied()
    if origins:
        return drift(
            f"`{NAME}` free, or imported from vllm.v1.kv_cache_interface",
            "it bound to " + ", ".join(origin_words(o) for o in origins),
        )
    anchors = [s for s in statements if same_meaning(s.node, IMPORT.before)]
    if len(anchors) != 1:
        # An import of KVCacheConfig among other names is not the line the
        # fix extends; say which it is rather than "none".
        others = [
            s for s in statements
            if isinstance(s.node, ast.ImportFrom) and s.node.module == "vllm.v1.kv_cache_interface"
            and any(a.name == "KVCacheConfig" for a in s.node.names)
        ]
        if anchors:
            found = f"{len(anchors)} of them"
        elif others:
            found = f"{source.describe(others[0].node, 100)}, which imports other names too"
        else:
            found = "none"
        return drift(
            f"`{IMPORT_0271.strip()}` at module level, to import {NAME} with it",
            found,
        )
    return one_a_line or pending(run_site(anchors))


def _loop(source: Source) -> Judged:
    cls = exactly_one(source.module.classes(SPECULATOR), f"one module-level class {SPECULATOR}")
    if isinstance(cls, Judged):
        return cls
    method = exactly_one(cls.defs(METHOD), f"one method {SPECULATOR}.{METHOD}")
    if isinstance(method, Judged):
        return method
    judged = judge_run(
        source, method, AOT_OFF, f"the `super().{METHOD}(...)` call in {SPECULATOR}.{METHOD}"
    )
    if judged.state is State.DRIFT:
        return judged
    # The loop must be all that sets the flag: any other setting, before the
    # loop or after it, decides the schedule in its stead.
    owned = []
    if judged.state is State.APPLIED:
        assert isinstance(judged.site, Run)
        owned = [judged.site.more[-1]]
    others = setters_besides(source, "aot_schedule", owned)
    if not others:
        return judged
    other = others[0]
    return drift(
        "no code in the module but the fix's loop that sets `aot_schedule`",
        f"{source.describe(other)} on line {other.lineno}, which the fix did not write; "
        "take it out, and the fix turns the schedule off where it must be",
    )


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """The import stays while other code reads the name."""
    judged = to_undo.get(IMPORT.name)
    if judged is None or judged.site is None:
        return {}
    loop = to_undo.get(AOT_OFF.name)
    leaving = [source.at(p).node for p in loop.site.paths()] if loop and loop.site else []
    readers = Readers(source).of(NAME, leaving)
    return kept_while_used(IMPORT, NAME, readers, what="its import")


DRAFT_AOT_SCHEDULE = Edit(
    "draft-aot-schedule",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
    "FA3's ahead-of-time split schedule is off for sliding-window draft "
    "attention groups, as in vLLM 0.30.0",
    Role.SEAM,
    (IMPORT, AOT_OFF),
    judge,
    writer="draft_aot_schedule:DraftAotSchedule",
    before_undo=before_undo,
    fix=Fix("#54374", "0.30.0"),
)
