"""Edit 6, speculator selection: a DFlash2 checkpoint gets the DFlash2 speculator.

Two files, one declaration each.

`SPECULATOR_SELECTION` targets `init_speculator` in
vllm/v1/worker/gpu/spec_decode/__init__.py, and in it the arm of its
`if`/`elif` chain that tests `speculative_config.method == "dflash"` (the `if`
or any `elif`). That arm must still be 0.27.1's: import `DFlashSpeculator` and
return `DFlashSpeculator(vllm_config, device)`; and a dflash draft must reach
it: nothing ahead of it may return or raise but an arm for another method
name (`speculative_config.method == "mtp"`), so an arm such as `use_eagle()`,
true for "dflash" too, ahead of it is drift. First in the arm it inserts

    if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
        from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
            DFlash2Speculator,
        )

        return DFlash2Speculator(vllm_config, device)

`V2_RUNNER_FORCING` targets class `VllmConfig` in vllm/config/vllm.py. In its
`use_v2_model_runner`, right after the `if self._dflash_needs_multi_kv_group():
return True` branch, it inserts `if self._is_dflash2_draft(): return True`; and
right before the method `_dflash_needs_multi_kv_group` it inserts the method
`_is_dflash2_draft`, which reads the draft's architectures the same way the
speculator selection does.

Why both: the DFlash2 candidate selector lives only in the V2 speculator.
Without the selection a DFlash2 checkpoint is drafted by `DFlashSpeculator`;
without the forcing a target that does not default to the V2 model runner
reaches the V1 proposer. Either way the draft silently degrades to DFlash1
instead of failing.

The forcing branch must come early, beside the other `return True` branches:
below the default-architecture check it would never be reached for the targets
that need it, so a DFlash2 branch elsewhere in the method is drift, not
"applied", and so is an anchor with anything ahead of it that may return
other than True (the user's VLLM_USE_V2_MODEL_RUNNER override aside). vLLM
releases that moved the V2 forcing out of `use_v2_model_runner` have no
multi-KV-group branch to anchor on; that is drift too, and the reason names
the methods that now consult `_dflash_needs_multi_kv_group`.

Reverted, the DFlash2 `if` leaves the dflash arm and `use_v2_model_runner`
with the lines above it, and `_is_dflash2_draft` leaves `VllmConfig`, the member
after it taking back the blank lines that set it apart.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles, out_of_class, statements_of, test_and_body
from ...framework.judging import is_attribute, method_before
from ...framework.meaning import meaning, same_meaning
from ...framework.source import Found, Source

SELECTOR = "init_speculator"
DFLASH_TEST = 'speculative_config.method == "dflash"'
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
DFLASH1_ARM = HUNKS.shipped("select the DFlash2 speculator")
DFLASH2_ARM = HUNKS.patched("select the DFlash2 speculator")
#: The DFlash2 arm the edit writes before the DFlash1 one, its test and body.
DFLASH2_SELECTION = DFLASH2_ARM.removesuffix(DFLASH1_ARM)
DFLASH2_TEST, DFLASH2_BRANCH_BODY = test_and_body(DFLASH2_SELECTION)

CONFIG_CLASS = "VllmConfig"
RUNNER = "use_v2_model_runner"
RUNNER_ANCHOR_METHOD = "_dflash_needs_multi_kv_group"
HELPER = "_is_dflash2_draft"
ANCHOR_BRANCH = f"if self.{RUNNER_ANCHOR_METHOD}():\n    return True\n"
DFLASH2_BRANCH_SOURCE = HUNKS.patched("a DFlash2 draft forces the V2 model runner")
#: The branch, without the comment above it.
(DFLASH2_BRANCH,) = statements_of(DFLASH2_BRANCH_SOURCE, comments=False)
#: The helper, out of the class its file writes it in (its docstring's later
#: line keeps the class's depth: it is string content).
HELPER_SOURCE = out_of_class(HUNKS.patched("DFlash2 draft detection"))

_WHY = (
    "A DFlash2 draft gets `DFlash2Speculator`, and forces the V2 model runner "
    "where that speculator lives (on V1 it would silently draft as DFlash1)."
)
SELECTION = HUNKS.hunk(
    "select the DFlash2 speculator",
    f"{SELECTOR}(), the arm of its if/elif chain that tests `{DFLASH_TEST}`",
    _WHY,
)
BRANCH = HUNKS.hunk(
    "a DFlash2 draft forces the V2 model runner",
    f"{CONFIG_CLASS}.{RUNNER}, right after the "
    f"`if self.{RUNNER_ANCHOR_METHOD}(): return True` branch",
    _WHY,
)
DETECTION = Hunk(
    "DFlash2 draft detection",
    f"class {CONFIG_CLASS}, right before {RUNNER_ANCHOR_METHOD}",
    None,
    HELPER_SOURCE,
    _WHY,
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Arm(Site):
    """The dflash arm (an `if`, or an `elif` of the chain), and the quote
    its test writes "dflash" with."""

    quote: str = '"'


# -- init_speculator ---------------------------------------------------------


def _arms(source: Source, function: Found) -> list[Found]:
    """The `if` and `elif` arms of the chains directly in the function body
    (an `if` nested in an `else:` is no arm, though Python's AST reads it as
    one)."""
    arms = []
    for statement in function.statements():
        arm: Found | None = statement
        while arm is not None and isinstance(arm.node, ast.If):
            arms.append(arm)
            following = arm.statements("orelse")
            arm = None
            if len(following) == 1 and source.starts_with(following[0].node, b"elif"):
                arm = following[0]
    return arms


def _other_method(test: ast.expr) -> bool:
    """Whether `test` is `speculative_config.method == "X"` (either way
    round) with X not "dflash": an arm no dflash draft can take."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = (test.left, test.comparators[0])
    method = any(is_attribute(side, "speculative_config", "method") for side in sides)
    names = [side.value for side in sides if isinstance(side, ast.Constant)]
    return method and len(names) == 1 and isinstance(names[0], str) and names[0] != "dflash"


def _leaves(statements: Sequence[ast.stmt]) -> bool:
    """Whether running `statements` may leave the function (a return or a
    raise; an assert only guards)."""
    return any(isinstance(n, ast.Return | ast.Raise) for s in statements for n in ast.walk(s))


def _taken_ahead(source: Source, function: Found, arm: ast.If) -> str | None:
    """What a dflash draft may meet before the dflash arm and leave the
    function by: an arm of another test, or a statement that returns or
    raises. A fork's arm for another method name is no such thing."""
    for statement in function.node.body:  # type: ignore[attr-defined]
        if not isinstance(statement, ast.If):
            if _leaves([statement]):
                return source.describe(statement)
            continue
        branch: ast.If | None = statement
        while branch is not None:
            if branch is arm:
                return None
            if not _other_method(branch.test) and _leaves(branch.body):
                return f"the arm testing {source.describe(branch.test)}"
            tail = branch.orelse
            if len(tail) == 1 and isinstance(tail[0], ast.If) and source.starts_with(tail[0], b"elif"):
                branch = tail[0]
            else:
                if _leaves(tail):
                    return f"the `else` of the chain testing {source.describe(statement.test)}"
                branch = None
    return None


def _statements_mean(statements: Sequence[ast.stmt], code: str) -> bool:
    return bool(statements) and meaning(statements) == meaning(code)


def _summary(source: Source, statements: Sequence[ast.stmt], what: str = "an arm") -> str:
    if len(statements) == 1:
        return f"{what} that is {source.describe(statements[0])}"
    return (
        f"{what} of {len(statements)} statements, from "
        f"{source.describe(statements[0])} to {source.describe(statements[-1])}"
    )


def _quote(source: Source, test: ast.expr) -> str:
    """The quote the test writes the "dflash" literal with."""
    for node in ast.walk(test):
        if isinstance(node, ast.Constant) and node.value == "dflash":
            return "'" if source.segment(node).startswith("'") else '"'
    return '"'


def judge_selection(source: Source) -> dict[str, Judged]:
    return {SELECTION.name: _selection(source)}


def _selection(source: Source) -> Judged:
    function = exactly_one(source.module.defs(SELECTOR), f"one module-level function {SELECTOR}()")
    if isinstance(function, Judged):
        return function
    every = _arms(source, function)
    arms = [a for a in every if same_meaning(a.node.test, DFLASH_TEST)]  # type: ignore[attr-defined]
    if len(arms) != 1:
        tests = ", ".join(source.describe(a.node.test) for a in every) or "none"  # type: ignore[attr-defined]
        return drift(
            f"one `if {DFLASH_TEST}:` arm in {SELECTOR}()",
            f"{len(arms)} such arms (the arms test {tests})",
        )
    (arm,) = arms
    node = arm.node
    assert isinstance(node, ast.If)
    ahead = _taken_ahead(source, function, node)
    if ahead is not None:
        return drift(
            f"the dflash arm of {SELECTOR}() to be the one a dflash draft reaches, "
            "as in vLLM 0.27.1",
            f"{ahead} ahead of it, which a dflash draft may take first; put the "
            "dflash arm ahead of it",
        )
    site = Arm(path=arm.pinned(), quote=_quote(source, node.test))
    body = node.body

    if _statements_mean(body, DFLASH2_ARM):
        return applied(site)
    first = body[0]
    if isinstance(first, ast.If) and same_meaning(first.test, DFLASH2_TEST):
        return drift(
            f"the dflash arm's `if {DFLASH2_TEST}:` to import "
            "DFlash2Speculator from vllm.v1.worker.gpu.spec_decode.dflash2."
            "speculator and return DFlash2Speculator(vllm_config, device), "
            "then fall back to DFlashSpeculator",
            "a different DFlash2 selection: "
            + (
                _summary(source, body)
                if _statements_mean(first.body, DFLASH2_BRANCH_BODY)
                else _summary(source, first.body, "a DFlash2 branch")
            ),
        )
    if not _statements_mean(body, DFLASH1_ARM):
        return drift(
            f"the dflash arm of {SELECTOR}() to import and return "
            "DFlashSpeculator(vllm_config, device), as in vLLM 0.27.1",
            _summary(source, body),
        )
    # Selecting DFlash2 before the chain would make the inserted copy dead
    # code and leave two places to keep in step.
    if any(
        isinstance(n, ast.If) and same_meaning(n.test, DFLASH2_TEST)
        for n in ast.walk(function.node)
    ):
        return drift(
            "the DFlash2Speculator selection inside the dflash arm",
            f"a `{DFLASH2_TEST}` test elsewhere in {SELECTOR}(); move the "
            "DFlash2 selection first into the dflash arm",
        )
    return pending(site)


# -- VllmConfig -------------------------------------------------------------------


def judge_forcing(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(CONFIG_CLASS), f"one module-level class {CONFIG_CLASS}")
    if isinstance(cls, Judged):
        return {BRANCH.name: cls, DETECTION.name: cls}
    detection = method_before(
        cls,
        DETECTION.after,
        RUNNER_ANCHOR_METHOD,
        expected=f"{CONFIG_CLASS}.{HELPER} to test the draft's architectures "
        'for "DFlash2DraftModel" as the backport does',
        remedy="remove or rename it",
    )
    return {BRANCH.name: _branch(source, cls), DETECTION.name: detection}


def _is_branch(statement: ast.stmt, code: str) -> bool:
    return isinstance(statement, ast.If) and not statement.orelse and same_meaning(statement, code)


def _branch(source: Source, cls: Found) -> Judged:
    """The branch right after the multi-KV-group one: pending, the site is
    that branch; applied, the DFlash2 branch."""
    runner = exactly_one(cls.defs(RUNNER), f"one method or property {CONFIG_CLASS}.{RUNNER}")
    if isinstance(runner, Judged):
        return runner
    statements = runner.statements()
    anchors = [i for i, s in enumerate(statements) if _is_branch(s.node, ANCHOR_BRANCH)]  # type: ignore[arg-type]
    if len(anchors) != 1:
        return drift(
            f"one `if self.{RUNNER_ANCHOR_METHOD}(): return True` branch in the "
            f"body of {CONFIG_CLASS}.{RUNNER}, to add the DFlash2 branch after",
            _no_anchor(source, cls, runner, len(anchors)),
        )
    (index,) = anchors
    early = _returns_before(statements[:index])
    if early is not None:
        return drift(
            f"only `return True` ahead of the `if self.{RUNNER_ANCHOR_METHOD}(): "
            f"return True` branch in {RUNNER}, besides the VLLM_USE_V2_MODEL_RUNNER "
            "override, as in vLLM 0.27.1",
            f"{source.describe(early)} ahead of it; the DFlash2 branch goes right "
            "after that branch and must come ahead of the checks that may return False",
        )
    ours = [i for i, s in enumerate(statements) if _is_branch(s.node, DFLASH2_BRANCH)]  # type: ignore[arg-type]
    if ours == [index + 1]:
        return applied(Site(path=statements[index + 1].pinned()))
    if ours:
        return drift(
            f"`if self.{HELPER}(): return True` right after the "
            f"`if self.{RUNNER_ANCHOR_METHOD}(): return True` branch",
            f"it elsewhere in {RUNNER}, "
            + (
                f"after {source.describe(statements[ours[0] - 1].node)}"
                if ours[0]
                else "first"
            )
            + "; move it right after that branch, ahead of the checks "
            "that may return False",
        )
    return pending(Site(path=statements[index].pinned()))


def _returns_before(statements: Sequence[Found]) -> ast.stmt | None:
    """The first statement ahead of the anchor that may return other than
    True. The user's VLLM_USE_V2_MODEL_RUNNER is returned as it is set: the
    one choice the forcing must not override."""
    overrides = {
        target.id
        for found in statements
        if isinstance(found.node, ast.Assign)
        and is_attribute(found.node.value, "envs", "VLLM_USE_V2_MODEL_RUNNER")
        for target in found.node.targets
        if isinstance(target, ast.Name)
    }
    for found in statements:
        for node in ast.walk(found.node):
            if not isinstance(node, ast.Return):
                continue
            value = node.value
            if isinstance(value, ast.Constant) and value.value is True:
                continue
            if isinstance(value, ast.Name) and value.id in overrides:
                continue
            return found.node  # type: ignore[return-value]
    return None


def _no_anchor(source: Source, cls: Found, runner: Found, count: int) -> str:
    if count:
        return f"{count} such branches"

    def calls(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Call) and is_attribute(n.func, "self", RUNNER_ANCHOR_METHOD)
            for n in ast.walk(node)
        )

    own = [s for s in runner.node.body if calls(s)]  # type: ignore[attr-defined]
    if own:
        return f"{RUNNER_ANCHOR_METHOD} used another way: {source.describe(own[0], 80)}"
    callers = [
        s.name
        for s in cls.node.body  # type: ignore[attr-defined]
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
        and s is not runner.node
        and calls(s)
    ]
    if callers:
        return (
            f"no such branch: this vLLM consults {RUNNER_ANCHOR_METHOD} in "
            f"{', '.join(callers)} instead, so it decides when to force the "
            f"V2 model runner outside {RUNNER} and the branch has no place "
            "to go"
        )
    return f"no such branch, and nothing in {CONFIG_CLASS} calls {RUNNER_ANCHOR_METHOD}"


SPECULATOR_SELECTION = Edit(
    "speculator-selection",
    "vllm/v1/worker/gpu/spec_decode/__init__.py",
    "init_speculator returns DFlash2Speculator for a DFlash2DraftModel draft",
    Role.SWITCH,
    (SELECTION,),
    judge_selection,
    writer="speculator_selection:SpeculatorSelection",
)

V2_RUNNER_FORCING = Edit(
    "speculator-selection",
    "vllm/config/vllm.py",
    "a DFlash2 draft forces the V2 model runner",
    Role.SWITCH,
    (BRANCH, DETECTION),
    judge_forcing,
    writer="speculator_selection:V2RunnerForcing",
)
