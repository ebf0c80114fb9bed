"""Fix: a DFlash draft's rotary cache covers every position the target
serves (upstream #57941, vLLM 0.33.0: the number is the one 0.33.0's own
comment in config/speculative.py and its tests of this fix cite).

The V2 DFlash speculator feeds the draft positions up to the target's
`max_model_len`, but the draft's rotary `cos_sin_cache` is sized by the
draft's own `max_position_embeddings`. A request longer than that reads the
cache out of bounds: an illegal memory access that kills the engine. 0.27.1
raises an EAGLE draft's `max_position_embeddings` to the target's
`max_model_len` (#48894) but not a DFlash draft's, and the backport forces
DFlash2 onto the V2 runner, which has no other guard.

Two files, one declaration each.

`DRAFT_POSITIONS` targets vllm/config/speculative.py:

rope types
    Inserts, at module level right before `class SpeculativeConfig`,
    `_CACHE_ONLY_ROPE_TYPES` and `_rope_only_sizes_cache(hf_config)`: whether
    every RoPE the config declares only sizes its cache from
    `max_position_embeddings` (raising it then changes no frequency).
    0.33.0's `iter_rope_parameters` does not exist in 0.27.1; the function
    walks the parameters itself with 0.27.1's `is_rope_parameters_nested`.
helper guard
    In `SpeculativeConfig._maybe_override_draft_max_position_embeddings`:
    a last parameter `any_rope_type: bool = False`, and right after its
    early return, `if not any_rope_type and not _rope_only_sizes_cache(...):
    return`. Called as upstream calls it, the helper is 0.33.0's.
arms
    In `SpeculativeConfig.__post_init__`, the `if self.method in ("eagle",
    "eagle3"):` arm that calls the helper passes `any_rope_type=True`, and
    right after it an `if self.method == "dflash":` arm calls the helper as
    0.33.0 does.
shares positions
    `SpeculativeConfig.draft_shares_target_positions()`, right before
    `use_dflash`.

`MAX_MODEL_LEN_CAP` targets vllm/config/vllm.py: `VllmConfig.
_limit_max_model_len_to_draft()` right before
`_get_v2_model_runner_unsupported_features`, called in `__post_init__` right
after the `if self.model_config is not None:` block that sets
`is_moe_model` (0.33.0's places). On the V2 runner it lowers the target's
`max_model_len` to a DFlash draft's when the draft's RoPE derives from its
length (yarn, dynamic, longrope...), where raising it would change the draft.

Unlike 0.33.0, which does this for every method but `draft_model`, only
DFlash drafts (DFlash1 and DFlash2) change: an EAGLE draft is still raised
whatever its RoPE type, and MTP, DSpark, Medusa and the rest are left as
0.27.1 leaves them, so a patched 0.27.1 changes nothing for users of
those. The log line of the raise stays 0.27.1's.

vLLM 0.26.0 raises no draft at all: it has neither the helper nor the
EAGLE arm (both came with 0.27.0). There the edit writes 0.33.0's helper
whole, right before `_verify_and_get_draft_tp` (0.27.1's place), and the
DFlash arm alone, right before the `if self.method in ("eagle", "eagle3",
"dflash"):` that wraps the draft's hf_config (where it stands after the
EAGLE arm in 0.27.1), so that it still runs on the draft's own config. EAGLE
drafts stay as 0.26.0 leaves them. `draft_shares_target_positions` says an
EAGLE draft shares the target's positions, which 0.26.0 does not make true;
only the max_model_len cap reads it, and only for DFlash drafts.

Reverted, each piece goes and the parameter and argument lists are written
as they were.
"""

from __future__ import annotations

import ast
import dataclasses

from ...framework.edit import (
    Edit,
    Fix,
    Judged,
    Role,
    Site,
    applied,
    drift,
    exactly_one,
    pending,
)
from ...framework.hunk_files import HunkFiles, statements_of, test_and_body
from ...framework.judging import method_before, other_version, statement_beside
from ...framework.meaning import function_of, meaning, parsed, same_meaning
from ...framework.names import Readers, module_bindings
from ...framework.source import Found, Path, Source
from ...framework.vocabulary import State

SPECULATIVE = "vllm/config/speculative.py"
CONFIG = "vllm/config/vllm.py"
CLASS = "SpeculativeConfig"
HELPER = "_maybe_override_draft_max_position_embeddings"
ROPE_TYPES = "_CACHE_ONLY_ROPE_TYPES"
ROPE_CHECK = "_rope_only_sizes_cache"
SHARES = "draft_shares_target_positions"
SHARES_ANCHOR = "use_dflash"
PARAMETER = "any_rope_type"

#: Each hunk's code, as the release ships it and as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
ROPE_TYPES_SOURCE, ROPE_CHECK_SOURCE = statements_of(HUNKS.patched("rope types"))

#: 0.27.1's signature of the helper, and the backport's.
HELPER_SIGNATURE = (
    "def f(draft_hf_config: PretrainedConfig, target_max_model_len: int): pass"
)
PARAMETER_SOURCE = f"{PARAMETER}: bool = False"
HELPER_SIGNATURE_AFTER = HELPER_SIGNATURE.replace("int)", f"int, {PARAMETER_SOURCE})")
#: The helper's early return, and the guard the fix writes right after it.
EARLY_RETURN = HUNKS.shipped("helper guard")
GUARD = HUNKS.patched("helper guard").removeprefix(EARLY_RETURN)

#: 0.27.1's EAGLE arm, and the fix's, with the DFlash arm right after it.
EAGLE_ARM = HUNKS.shipped("dflash arm")
EAGLE_ARM_AFTER = statements_of(HUNKS.patched("dflash arm"))[0]
DFLASH_ARM = HUNKS.patched("dflash arm").removeprefix(EAGLE_ARM_AFTER)
EAGLE_TEST, EAGLE_CALL = test_and_body(EAGLE_ARM)
ARGUMENT_SOURCE = f"{PARAMETER}=True"

# -- vLLM 0.26.0's form: no helper and no EAGLE arm to change ------------------

HELPER_ANCHOR_0260 = "_verify_and_get_draft_tp"
WRAP_TEST = 'self.method in ("eagle", "eagle3", "dflash")'
#: 0.33.0's helper, and the DFlash arm alone.
HELPER_0260 = HUNKS.patched("helper guard", "0.26.0")
DFLASH_ARM_0260 = HUNKS.patched("dflash arm", "0.26.0")

SHARES_SOURCE = HUNKS.patched("shares positions")

CONFIG_CLASS = "VllmConfig"
LIMIT = "_limit_max_model_len_to_draft"
LIMIT_ANCHOR = "_get_v2_model_runner_unsupported_features"
LIMIT_SOURCE = HUNKS.patched("max_model_len cap")
LIMIT_CALL = HUNKS.patched("max_model_len cap call").strip()
MOE_FLAG = "self.parallel_config.is_moe_model = self.model_config.is_moe"
MODEL_CONFIG_TEST = "self.model_config is not None"

_WHY = (
    "A request longer than a DFlash draft's `max_position_embeddings` reads "
    "its rotary cache out of bounds and kills the engine: the draft is "
    "raised to the target's `max_model_len` where its RoPE only sizes the "
    "cache, and `max_model_len` is capped to the draft's otherwise."
)
ROPE_HUNK = HUNKS.hunk(
    "rope types",
    f"module level, right before `class {CLASS}`",
    _WHY,
)
GUARD_HUNK = HUNKS.hunk(
    "helper guard",
    f"{CLASS}.{HELPER}: a last parameter, and a return right after its early one; "
    f"on vLLM 0.26.0, which has no such helper, the whole of 0.33.0's, right before "
    f"{HELPER_ANCHOR_0260}",
    _WHY,
)
ARMS_HUNK = HUNKS.hunk(
    "dflash arm",
    f"{CLASS}.__post_init__, the `if {EAGLE_TEST}:` arm that calls {HELPER}, "
    "and right after it; on vLLM 0.26.0, which has no such arm, the DFlash arm "
    f"alone, right before the `if {WRAP_TEST}:` that wraps the draft's hf_config",
    _WHY,
)
SHARES_HUNK = HUNKS.hunk(
    "shares positions",
    f"class {CLASS}, right before {SHARES_ANCHOR}",
    _WHY,
)
LIMIT_HUNK = HUNKS.hunk(
    "max_model_len cap",
    f"class {CONFIG_CLASS}, right before {LIMIT_ANCHOR}",
    _WHY,
)
LIMIT_CALL_HUNK = HUNKS.hunk(
    "max_model_len cap call",
    f"{CONFIG_CLASS}.__post_init__, right after the `if {MODEL_CONFIG_TEST}:` "
    "block that sets `is_moe_model`",
    _WHY,
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Helpers(Site):
    """Applied: the constant and the function, to remove."""

    function: Path | None = None


@dataclasses.dataclass(kw_only=True, eq=False)
class Guarded(Site):
    """The helper: `path` is its early return (pending) or the guard
    (applied); `function` the helper itself, by name, to write its
    parameters."""

    function: Path


@dataclasses.dataclass(kw_only=True, eq=False)
class Inserted(Site):
    """vLLM 0.26.0's form: the whole statement (the helper, or the DFlash
    arm) goes in right before `path` (pending), or is `path` (applied)."""


@dataclasses.dataclass(kw_only=True, eq=False)
class Arms(Site):
    """The EAGLE arm; applied, also the DFlash arm after it."""

    dflash: Path | None = None


# -- speculative.py ------------------------------------------------------------


def judge_speculative(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(CLASS), f"one module-level class {CLASS}")
    if isinstance(cls, Judged):
        return {h.name: cls for h in DRAFT_POSITIONS.hunks}
    if _in_0260_form(cls):
        guard, arms = _helper_0260(cls), _arm_0260(source, cls)
    else:
        guard, arms = _guard(cls), _arms(source, cls)
    return {
        ROPE_HUNK.name: _rope(source, cls),
        GUARD_HUNK.name: guard,
        ARMS_HUNK.name: arms,
        SHARES_HUNK.name: method_before(
            cls,
            SHARES_SOURCE,
            SHARES_ANCHOR,
            expected=f"{CLASS}.{SHARES} as the backport writes it",
            remedy="remove or rename it",
        ),
    }


def _assigns(statement: ast.AST, name: str) -> bool:
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in statement.targets
    )


def _rope(source: Source, cls: Found) -> Judged:
    constants = [s for s in source.module.statements() if _assigns(s.node, ROPE_TYPES)]
    functions = source.module.defs(ROPE_CHECK)
    refused = other_version(functions, ROPE_CHECK_SOURCE, f"`{ROPE_CHECK}` as the backport writes it")
    if refused is not None:
        return refused
    (constant,) = parsed(ROPE_TYPES_SOURCE)
    for found in constants:
        if not same_meaning(found.node, constant):
            return drift(
                f"`{ROPE_TYPES}` as the backport writes it",
                f"{source.describe(found.node)}; the backport will not overwrite it",
            )
    if len(constants) > 1 or len(functions) > 1:
        return drift(f"one `{ROPE_TYPES}` and one `{ROPE_CHECK}`", "more than one")
    if constants and functions:
        return applied(Helpers(path=constants[0].pinned(), function=functions[0].pinned()))
    if constants or functions:
        have, lack = (ROPE_TYPES, ROPE_CHECK) if constants else (ROPE_CHECK, ROPE_TYPES)
        return drift(f"both `{ROPE_TYPES}` and `{ROPE_CHECK}`, or neither", f"`{have}` without `{lack}`")
    return pending(Helpers(path=cls.pinned()))


def _is_eagle_arm(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and same_meaning(statement.test, EAGLE_TEST)


def _in_0260_form(cls: Found) -> bool:
    """vLLM 0.26.0 raises no draft: it has neither the helper nor an EAGLE
    arm. The helper the backport writes there marks it patched."""
    helpers = cls.defs(HELPER)
    if any(p.walk(_is_eagle_arm) for p in cls.defs("__post_init__")):
        return False
    return not helpers or (len(helpers) == 1 and same_meaning(helpers[0].node, HELPER_0260))


def _helper_0260(cls: Found) -> Judged:
    judged = method_before(
        cls,
        HELPER_0260,
        HELPER_ANCHOR_0260,
        expected=f"{CLASS}.{HELPER} as the backport writes it for vLLM 0.26.0",
        remedy="remove or rename it",
    )
    if judged.site is None:
        return judged
    return judged._replace(site=Inserted(path=judged.site.path))


def _arm_0260(source: Source, cls: Found) -> Judged:
    post_init = exactly_one(cls.defs("__post_init__"), f"one method {CLASS}.__post_init__")
    if isinstance(post_init, Judged):
        return post_init
    wrap = exactly_one(
        post_init.walk(lambda s: isinstance(s, ast.If) and same_meaning(s.test, WRAP_TEST)),
        f"one `if {WRAP_TEST}:` in {CLASS}.__post_init__ (it wraps the draft's hf_config)",
    )
    if isinstance(wrap, Judged):
        return wrap
    ours = post_init.walk(lambda s: same_meaning(s, DFLASH_ARM_0260))
    if not ours:
        return pending(Inserted(path=wrap.pinned()))
    previous = source.neighbour(wrap, -1)
    if len(ours) == 1 and previous is not None and ours[0].path == previous.path:
        return applied(Inserted(path=previous.pinned()))
    return drift(
        f'the backport\'s `if self.method == "dflash":` arm right before `if {WRAP_TEST}:`, '
        "so that it runs on the draft's own hf_config",
        f"{len(ours)} of them" if len(ours) > 1 else "it elsewhere",
    )


RAISE = "draft_hf_config.max_position_embeddings = target_max_model_len"


def _guard(cls: Found) -> Judged:
    helper = exactly_one(cls.defs(HELPER), f"one method {CLASS}.{HELPER}")
    if isinstance(helper, Judged):
        return helper
    node = helper.node
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    if same_meaning(node, HELPER_0260):
        return drift(
            f"{CLASS}.{HELPER} as vLLM 0.27.1 has it, or as the backport changes it there",
            "the one the backport writes for vLLM 0.26.0, beside an EAGLE arm that 0.26.0 lacks",
        )
    # What the guard's callers rely on the helper to do past the guard.
    raises = [s for s in node.body if same_meaning(s, RAISE)]
    decorators = [ast.unparse(d) for d in node.decorator_list]
    if len(raises) != 1 or decorators != ["staticmethod"]:
        return drift(
            f"{CLASS}.{HELPER} a staticmethod that raises the draft's "
            f"max_position_embeddings (`{RAISE}`), as in vLLM 0.27.1",
            f"{len(raises)} such statements" if len(raises) != 1
            else f"its decorators {decorators}",
        )
    guard = statement_beside(
        helper,
        lambda s: same_meaning(s, EARLY_RETURN),
        "its early return for a missing or large enough max_position_embeddings",
        GUARD,
        after=True,
    )
    arguments = meaning(node.args)
    before = arguments == meaning(function_of(HELPER_SIGNATURE).args)
    after = arguments == meaning(function_of(HELPER_SIGNATURE_AFTER).args)
    if not before and not after:
        return drift(
            f"{CLASS}.{HELPER}({', '.join(a.arg for a in function_of(HELPER_SIGNATURE).args.args)}) "
            "as in vLLM 0.27.1",
            f"its parameters {ast.unparse(node.args)!r}",
        )
    if guard.state is State.DRIFT:
        return guard
    if after != (guard.state is State.APPLIED):
        return drift(
            f"the `{PARAMETER}` parameter and the RoPE guard of {HELPER} together, or neither",
            "the parameter without the guard" if after else "the guard without the parameter",
        )
    assert guard.site is not None
    return guard._replace(site=Guarded(path=guard.site.path, function=helper.path))


def _arms(source: Source, cls: Found) -> Judged:
    post_init = exactly_one(cls.defs("__post_init__"), f"one method {CLASS}.__post_init__")
    if isinstance(post_init, Judged):
        return post_init
    arms = post_init.walk(_is_eagle_arm)
    if len(arms) != 1:
        return drift(
            f"one `if {EAGLE_TEST}:` arm in {CLASS}.__post_init__ as in vLLM 0.27.1, "
            f"or neither it nor {HELPER} as in vLLM 0.26.0",
            f"{len(arms)} of them" if arms else f"none, and a {HELPER}",
        )
    (arm,) = arms
    following = source.neighbour(arm, 1)
    dflash = post_init.walk(lambda s: same_meaning(s, DFLASH_ARM))
    if same_meaning(arm.node, EAGLE_ARM) and not dflash:
        return pending(Arms(path=arm.pinned()))
    if (
        same_meaning(arm.node, EAGLE_ARM_AFTER)
        and following is not None
        and [d.path for d in dflash] == [following.path]
    ):
        return applied(Arms(path=arm.pinned(), dflash=following.pinned()))
    if not same_meaning(arm.node, EAGLE_ARM) and not same_meaning(arm.node, EAGLE_ARM_AFTER):
        return drift(
            f"the `if {EAGLE_TEST}:` arm to call {HELPER}(draft hf_config, target "
            "max_model_len), as in vLLM 0.27.1",
            f"an arm that is {source.describe(arm.node, 90)}",
        )
    return drift(
        f"`{PARAMETER}=True` in the EAGLE arm's call and the backport's "
        '`if self.method == "dflash":` arm right after it, or neither',
        "one without the other",
    )


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """The RoPE helpers go only where nothing but the edit's own code reads
    them (that goes too, or, written another way, drifts in its own hunk)."""
    if ROPE_HUNK.name not in to_undo:
        return {}
    leaving: list[ast.AST] = [f.node for f in source.module.defs(ROPE_CHECK)]
    leaving += [s.node for s in source.module.statements() if _assigns(s.node, ROPE_TYPES)]
    for cls in source.module.classes(CLASS):
        leaving += [m.node for m in cls.defs(SHARES)]
        for helper in cls.defs(HELPER):
            if same_meaning(helper.node, HELPER_0260):
                leaving.append(helper.node)
            leaving += [g.node for g in helper.walk(lambda s: same_meaning(s, GUARD))]
    readers = Readers(source)
    reads = [
        f"`{name}` read by {', '.join(users)}"
        for name in (ROPE_CHECK, ROPE_TYPES)
        if (users := readers.of(name, leaving))
    ]
    if not reads:
        return {}
    return {
        ROPE_HUNK.name: drift(
            f"`{ROPE_CHECK}` and `{ROPE_TYPES}` read by nothing but the backport's "
            "code, so that they can go",
            "; ".join(reads) + " (removing them would break it)",
        )
    }


# -- vllm.py -----------------------------------------------------------------------


def judge_config(source: Source) -> dict[str, Judged]:
    cls = exactly_one(
        source.module.classes(CONFIG_CLASS), f"one module-level class {CONFIG_CLASS}"
    )
    if isinstance(cls, Judged):
        return {LIMIT_HUNK.name: cls, LIMIT_CALL_HUNK.name: cls}
    method = method_before(
        cls,
        LIMIT_SOURCE,
        LIMIT_ANCHOR,
        expected=f"{CONFIG_CLASS}.{LIMIT} as the backport writes it",
        remedy="remove or rename it",
    )
    if method.state is State.PENDING and "logger" not in module_bindings(source.tree.body):
        method = drift(
            "a module-level `logger`, which the cap warns with", "none"
        )
    post_init = exactly_one(cls.defs("__post_init__"), f"one method {CONFIG_CLASS}.__post_init__")
    if isinstance(post_init, Judged):
        return {LIMIT_HUNK.name: method, LIMIT_CALL_HUNK.name: post_init}
    call = statement_beside(
        post_init,
        _sets_moe_flag,
        f"the `if {MODEL_CONFIG_TEST}:` block that sets `is_moe_model`",
        LIMIT_CALL,
        after=True,
    )
    return {LIMIT_HUNK.name: method, LIMIT_CALL_HUNK.name: call}


def _sets_moe_flag(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.If)
        and not statement.orelse
        and same_meaning(statement.test, MODEL_CONFIG_TEST)
        and any(same_meaning(s, MOE_FLAG) for s in statement.body)
    )


DRAFT_POSITIONS = Edit(
    "draft-max-position",
    SPECULATIVE,
    "a DFlash draft's max_position_embeddings is raised to the target's "
    "max_model_len where its RoPE only sizes the cache",
    Role.SEAM,
    (ROPE_HUNK, GUARD_HUNK, ARMS_HUNK, SHARES_HUNK),
    judge_speculative,
    writer="draft_max_position:DraftPositions",
    before_undo=before_undo,
    fix=Fix("#57941", "0.33.0"),
)

MAX_MODEL_LEN_CAP = Edit(
    "draft-max-position",
    CONFIG,
    "max_model_len is capped to a DFlash draft's where its RoPE derives from "
    "its length",
    # It calls what DRAFT_POSITIONS adds: written after it, taken out before.
    Role.SWITCH,
    (LIMIT_HUNK, LIMIT_CALL_HUNK),
    judge_config,
    writer="draft_max_position:MaxModelLenCap",
    fix=Fix("#57941", "0.33.0"),
)
