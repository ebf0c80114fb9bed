"""Fixes: what the backport cannot serve is refused when the engine's
config is built, in one line that names the limit and the vLLM release that
lifts it, instead of a crash at load time or a silently wrong draft.

`SPECULATORS_FORMAT` (vllm/transformers_utils/configs/speculators/base.py,
vLLM 0.29.0): a Speculators-format config whose `speculators_model_type` is
"dflash2", by both the ways vLLM reads one: as the model
(`SpeculatorsConfig.build_vllm_speculative_config`, right before its
`return result`) and as `speculative_config.model`
(`SpeculatorsConfig.extract_transformers_pre_trained_config`, right before
its check that the type is supported). 0.27.1 fails on it in pydantic's or
in the registry's words.

The refusal tests for a DFlash2 draft by its Speculators type: DFlash1
drafts are left as 0.27.1 serves them. Each raises
NotImplementedError, as 0.27.1 does for a method it does not support:
pydantic, which builds vLLM's configs, turns a ValueError into a validation
error of several lines, but lets this one through as it is. Given as
`speculative_config.model`, a Speculators config is parsed under vLLM's
config retry, which logs the same line once more before it gives up.
Reverted, each refusal goes with the comment above it.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles, statements_of
from ...framework.judging import statement_beside
from ...framework.meaning import same_meaning
from ...framework.names import module_bindings
from ...framework.source import Source
from ...framework.vocabulary import State

SPECULATORS = "vllm/transformers_utils/configs/speculators/base.py"
SPECULATORS_CLASS = "SpeculatorsConfig"
TYPE_ROUTE = "extract_transformers_pre_trained_config"
TYPE_TEST = "speculators_model_type not in SUPPORTED_SPECULATORS_TYPES"
METHOD_ROUTE = "build_vllm_speculative_config"
#: Each hunk's code as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
_SPECULATORS_WHY = (
    "A Speculators-format dflash2 config is refused in one line naming vLLM "
    "0.29.0, which reads it, instead of an unreadable validation error."
)
TYPE_HUNK = HUNKS.hunk(
    "speculative_config.model route",
    f"{SPECULATORS_CLASS}.{TYPE_ROUTE}, right before `if {TYPE_TEST}:`",
    _SPECULATORS_WHY,
)
METHOD_HUNK = HUNKS.hunk(
    "model route",
    f"{SPECULATORS_CLASS}.{METHOD_ROUTE}, right before `return result`",
    _SPECULATORS_WHY,
)
#: Each refusal, without the comment above it.
(TYPE_REFUSAL,) = statements_of(TYPE_HUNK.after, comments=False)
(METHOD_REFUSAL,) = statements_of(METHOD_HUNK.after, comments=False)


def _mentions_dflash2(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == "dflash2" for n in ast.walk(test))


def judge_speculators(source: Source) -> dict[str, Judged]:
    cls = exactly_one(
        source.module.classes(SPECULATORS_CLASS), f"one module-level class {SPECULATORS_CLASS}"
    )
    if isinstance(cls, Judged):
        return {TYPE_HUNK.name: cls, METHOD_HUNK.name: cls}
    judged = {}
    for hunk, method, is_anchor, anchor, code in (
        (
            TYPE_HUNK,
            TYPE_ROUTE,
            lambda s: isinstance(s, ast.If) and same_meaning(s.test, TYPE_TEST),
            f"`if {TYPE_TEST}:`",
            TYPE_REFUSAL,
        ),
        (
            METHOD_HUNK,
            METHOD_ROUTE,
            lambda s: same_meaning(s, "return result"),
            "`return result`",
            METHOD_REFUSAL,
        ),
    ):
        found = exactly_one(cls.defs(method), f"one method {SPECULATORS_CLASS}.{method}")
        if isinstance(found, Judged):
            judged[hunk.name] = found
            continue
        beside = statement_beside(found, is_anchor, anchor, code, after=False)
        # Code of its own for "dflash2" (0.29.0 maps it to "dflash") is not
        # ours to add to, nor to take out.
        tests = found.walk(lambda s: isinstance(s, ast.If) and _mentions_dflash2(s.test))
        ours = 1 if beside.state is State.APPLIED else 0
        if beside.state is not State.DRIFT and len(tests) > ours:
            beside = drift(
                f'no test for "dflash2" in {SPECULATORS_CLASS}.{method} but the '
                "backport's refusal",
                f"{source.describe(tests[0].node.test)} handled otherwise",  # type: ignore[attr-defined]
            )
        judged[hunk.name] = beside
    if "SUPPORTED_SPECULATORS_TYPES" not in module_bindings(source.tree.body):
        judged[TYPE_HUNK.name] = drift(
            "`SUPPORTED_SPECULATORS_TYPES` imported at module level", "none"
        )
    return judged


SPECULATORS_FORMAT = Edit(
    "refuse-speculators",
    SPECULATORS,
    "a Speculators-format dflash2 config is refused in one line, whichever "
    "way it is given",
    Role.SEAM,
    (TYPE_HUNK, METHOD_HUNK),
    judge_speculators,
    writer="refuse_speculators:SpeculatorsFormat",
    fix=Fix("", "0.29.0"),
)
