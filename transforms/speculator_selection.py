"""Edit 6, speculator selection: a DFlash2 checkpoint gets the DFlash2 speculator.

Two files, one codemod each.

`SpeculatorSelection` targets `init_speculator` in
vllm/v1/worker/gpu/spec_decode/__init__.py, and in it the arm of its
`if`/`elif` chain that tests `speculative_config.method == "dflash"` (the `if`
or any `elif`). That arm must still be 0.27.1's: import `DFlashSpeculator` and return
`DFlashSpeculator(vllm_config, device)`. First in the arm it inserts

    if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
        from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
            DFlash2Speculator,
        )

        return DFlash2Speculator(vllm_config, device)

`V2RunnerForcing` targets class `VllmConfig` in vllm/config/vllm.py. In its
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
"applied". vLLM releases that moved the V2 forcing out of `use_v2_model_runner`
have no multi-KV-group branch to anchor on; that is drift too, and the reason
names the methods that now consult `_dflash_needs_multi_kv_group`.

Reverted, the DFlash2 `if` leaves the dflash arm and `use_v2_model_runner`
with the lines above it, and `_is_dflash2_draft` leaves `VllmConfig`, the member
after it taking back the blank lines that set it apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import libcst as cst

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    edited_class,
    exactly_one,
    pending,
    replaced,
    with_block,
)
from ._meaning import (
    code_of,
    describe,
    find_all,
    is_attribute,
    same_meaning,
    string_value,
)
from ._names import members_named, named
from .hunks import (
    ANCHOR_BRANCH,
    CONFIG_CLASS,
    DFLASH2_BRANCH,
    DFLASH2_BRANCH_BODY,
    DFLASH2_SELECTION,
    DFLASH2_TEST,
    DFLASH_TEST,
    RUNNER,
    SELECTOR,
    SPECULATOR_SELECTION,
    V2_RUNNER_FORCING,
)
from .hunks import DFLASH2_HELPER as HELPER
from .hunks import RUNNER_ANCHOR_METHOD as ANCHOR_METHOD

(SELECTION,) = SPECULATOR_SELECTION.hunks
BRANCH, DETECTION = V2_RUNNER_FORCING.hunks
DFLASH1_ARM, DFLASH2_ARM = SELECTION.before, SELECTION.after


def _statements_mean(statements: Sequence[cst.BaseStatement], source: str) -> bool:
    code = "".join(code_of(s) for s in statements)
    return bool(code.strip()) and same_meaning(code, source)


class SpeculatorSelection(BackportCodemod):
    SPEC = SPECULATOR_SELECTION

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        return {SELECTION.name: self._judge(tree)}

    def _judge(self, tree: cst.Module) -> Judged:
        function = exactly_one(
            named(tree.body, cst.FunctionDef, SELECTOR),
            f"one module-level function {SELECTOR}()",
        )
        if isinstance(function, Judged):
            return function
        arms = [
            arm for arm in self._arms(function) if same_meaning(arm.test, DFLASH_TEST)
        ]
        if len(arms) != 1:
            tests = ", ".join(describe(a.test) for a in self._arms(function)) or "none"
            return drift(
                f"one `if {DFLASH_TEST}:` arm in {SELECTOR}()",
                f"{len(arms)} such arms (the arms test {tests})",
            )
        (arm,) = arms
        body = arm.body
        assert isinstance(body, cst.IndentedBlock)

        if _statements_mean(body.body, DFLASH2_ARM):
            return applied((function, arm))
        first = body.body[0] if body.body else None
        if isinstance(first, cst.If) and same_meaning(first.test, DFLASH2_TEST):
            return drift(
                f"the dflash arm's `if {DFLASH2_TEST}:` to import "
                "DFlash2Speculator from vllm.v1.worker.gpu.spec_decode.dflash2."
                "speculator and return DFlash2Speculator(vllm_config, device), "
                "then fall back to DFlashSpeculator",
                "a different DFlash2 selection: "
                + (
                    self._arm_summary(body.body)
                    if _statements_mean(first.body.body, DFLASH2_BRANCH_BODY)
                    else self._arm_summary(first.body.body, "a DFlash2 branch")
                ),
            )
        if not _statements_mean(body.body, DFLASH1_ARM):
            return drift(
                f"the dflash arm of {SELECTOR}() to import and return "
                "DFlashSpeculator(vllm_config, device), as in vLLM 0.27.1",
                self._arm_summary(body.body),
            )
        # Selecting DFlash2 before the chain would make the inserted copy dead
        # code and leave two places to keep in step.
        if find_all(
            function,
            lambda n: isinstance(n, cst.If) and same_meaning(n.test, DFLASH2_TEST),
        ):
            return drift(
                "the DFlash2Speculator selection inside the dflash arm",
                f"a `{DFLASH2_TEST}` test elsewhere in {SELECTOR}(); move the "
                "DFlash2 selection first into the dflash arm",
            )
        return pending((function, arm))

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        """The DFlash2 selection first in the dflash arm, quoted as the arm's
        own test is."""
        function, arm = sites[SELECTION.name]
        selection = self.statement(self._quoted(DFLASH2_SELECTION, arm.test))
        return self._with_arm_body(
            tree, function, arm.body, [selection, *arm.body.body]
        )

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        # The forward edit put the `if` first with no lines of its own above
        # it and left the rest of the arm as it was; lines above a DFlash2
        # `if` written another way go with it.
        function, arm = sites[SELECTION.name]
        return self._with_arm_body(tree, function, arm.body, arm.body.body[1:])

    @staticmethod
    def _with_arm_body(
        tree: cst.Module,
        function: cst.FunctionDef,
        body: cst.IndentedBlock,
        statements: Sequence[cst.BaseStatement],
    ) -> cst.Module:
        new_function = with_block(function, body, statements)
        return tree.with_changes(body=replaced(tree.body, function, new_function))

    @staticmethod
    def _arms(function: cst.FunctionDef) -> list[cst.If]:
        """Every `if` and `elif` of the chains directly in the function body."""
        arms: list[cst.If] = []
        for statement in function.body.body:
            node: cst.CSTNode | None = statement
            while isinstance(node, cst.If):
                arms.append(node)
                node = node.orelse
        return arms

    @staticmethod
    def _arm_summary(
        statements: Sequence[cst.BaseStatement], what: str = "an arm"
    ) -> str:
        if len(statements) == 1:
            return f"{what} that is {describe(statements[0])}"
        return (
            f"{what} of {len(statements)} statements, from "
            f"{describe(statements[0])} to {describe(statements[-1])}"
        )

    @staticmethod
    def _quoted(source: str, test: cst.BaseExpression) -> str:
        """The spec's code in the quote style the dflash arm's own test uses."""
        literal = next(
            (
                n
                for n in find_all(test, lambda n: isinstance(n, cst.SimpleString))
                if string_value(n) == "dflash"
            ),
            None,
        )
        if isinstance(literal, cst.SimpleString) and literal.quote == "'":
            return source.replace('"', "'")
        return source


class V2RunnerForcing(BackportCodemod):
    SPEC = V2_RUNNER_FORCING

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        cls = exactly_one(
            named(tree.body, cst.ClassDef, CONFIG_CLASS),
            f"one module-level class {CONFIG_CLASS}",
        )
        if isinstance(cls, Judged):
            return {BRANCH.name: cls, DETECTION.name: cls}
        detection = self.method_before(
            cls,
            DETECTION.after,
            ANCHOR_METHOD,
            expected=f"{CONFIG_CLASS}.{HELPER} to test the draft's architectures "
            'for "DFlash2DraftModel" as the backport does',
            remedy="remove or rename it",
        )
        # Each site carries the class: both hunks rewrite it, in one go.
        return {
            BRANCH.name: self._branch(cls),
            DETECTION.name: dataclasses.replace(detection, site=(cls, detection.site)),
        }

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        cls = swap = insert = None
        if BRANCH.name in sites:
            cls, runner, index = sites[BRANCH.name]
            statements = list(runner.body.body)
            statements.insert(index + 1, self.statement(BRANCH.after))
            swap = runner, with_block(runner, runner.body, statements)
        if DETECTION.name in sites:
            cls, insert = sites[DETECTION.name]
        assert cls is not None
        return edited_class(tree, cls, swap=swap, insert=insert)

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        cls = swap = method = None
        if BRANCH.name in sites:
            # The branch goes with the comment and blank line above it, which
            # the forward edit inserted with it; what follows kept its own.
            cls, runner, index = sites[BRANCH.name]
            statements = list(runner.body.body)
            del statements[index + 1]
            swap = runner, with_block(runner, runner.body, statements)
        if DETECTION.name in sites:
            cls, method = sites[DETECTION.name]
        assert cls is not None
        return edited_class(tree, cls, swap=swap, remove=method)

    def _branch(self, cls: cst.ClassDef) -> Judged:
        """The branch right after the multi-KV-group one; the site is the
        class, `use_v2_model_runner` and that branch's index."""
        runner = exactly_one(
            members_named(cls, cst.FunctionDef, RUNNER),
            f"one method or property {CONFIG_CLASS}.{RUNNER}",
        )
        if isinstance(runner, Judged):
            return runner
        statements = list(runner.body.body)
        anchors = [i for i, s in enumerate(statements) if _is_branch(s, ANCHOR_BRANCH)]
        if len(anchors) != 1:
            return drift(
                f"one `if self.{ANCHOR_METHOD}(): return True` branch in the "
                f"body of {CONFIG_CLASS}.{RUNNER}, to add the DFlash2 branch after",
                self._no_anchor(cls, runner, len(anchors)),
            )
        (index,) = anchors
        ours = [i for i, s in enumerate(statements) if _is_branch(s, DFLASH2_BRANCH)]
        if ours == [index + 1]:
            return applied((cls, runner, index))
        if ours:
            return drift(
                f"`if self.{HELPER}(): return True` right after the "
                f"`if self.{ANCHOR_METHOD}(): return True` branch",
                f"it elsewhere in {RUNNER}, "
                + (f"after {describe(statements[ours[0] - 1])}" if ours[0] else "first")
                + "; move it right after that branch, ahead of the checks "
                "that may return False",
            )
        return pending((cls, runner, index))

    @staticmethod
    def _no_anchor(cls: cst.ClassDef, runner: cst.FunctionDef, count: int) -> str:
        if count:
            return f"{count} such branches"

        def calls(node: cst.CSTNode) -> bool:
            return isinstance(node, cst.Call) and is_attribute(
                node.func, "self", ANCHOR_METHOD
            )

        own = [s for s in runner.body.body if find_all(s, calls)]
        if own:
            return f"{ANCHOR_METHOD} used another way: {describe(own[0], 80)}"
        callers = [
            s.name.value
            for s in cls.body.body
            if isinstance(s, cst.FunctionDef) and s is not runner and find_all(s, calls)
        ]
        if callers:
            return (
                f"no such branch: this vLLM consults {ANCHOR_METHOD} in "
                f"{', '.join(callers)} instead, so it decides when to force the "
                f"V2 model runner outside {RUNNER} and the branch has no place "
                "to go"
            )
        return f"no such branch, and nothing in {CONFIG_CLASS} calls {ANCHOR_METHOD}"


def _is_branch(statement: cst.BaseStatement, source: str) -> bool:
    return (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and same_meaning(statement, source)
    )
