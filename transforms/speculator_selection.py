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
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from ._base import BackportCodemod, State
from ._meaning import code_of, describe, meaning, same_meaning, string_value

# -- vllm/v1/worker/gpu/spec_decode/__init__.py ---------------------------

SELECTOR = "init_speculator"
DFLASH_TEST = 'speculative_config.method == "dflash"'
DFLASH1_ARM = """
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
    DFlashSpeculator,
)

return DFlashSpeculator(vllm_config, device)
"""
DFLASH2_TEST = (
    '"DFlash2DraftModel" in speculative_config.draft_model_config.architectures'
)
DFLASH2_BRANCH_BODY = """\
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
    DFlash2Speculator,
)

return DFlash2Speculator(vllm_config, device)
"""
DFLASH2_SELECTION = f"if {DFLASH2_TEST}:\n" + textwrap.indent(
    DFLASH2_BRANCH_BODY, "    "
)
DFLASH2_ARM = DFLASH2_SELECTION + DFLASH1_ARM

# -- vllm/config/vllm.py --------------------------------------------------

CONFIG_CLASS = "VllmConfig"
RUNNER = "use_v2_model_runner"
ANCHOR_METHOD = "_dflash_needs_multi_kv_group"
HELPER = "_is_dflash2_draft"
ANCHOR_BRANCH = f"if self.{ANCHOR_METHOD}():\n    return True\n"
DFLASH2_BRANCH = f"if self.{HELPER}():\n    return True\n"
DFLASH2_BRANCH_SOURCE = (
    "\n"
    "# The DFlash2 candidate selector exists only in the V2 speculator. On V1\n"
    "# the same checkpoint drafts through DFlashProposer, which never calls\n"
    "# it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.\n"
    + DFLASH2_BRANCH
)
# A docstring's continuation line is string content, not indentation: it is
# written here as it must read inside the class.
HELPER_SOURCE = (
    f"def {HELPER}(self) -> bool:\n"
    '    """Whether the DFlash draft is a DFlash2 one, by the architecture the\n'
    '        speculator selects on (v1/worker/gpu/spec_decode/__init__.py)."""\n'
    "    spec = self.speculative_config\n"
    '    if spec is None or spec.method != "dflash":\n'
    "        return False\n"
    '    draft_config = getattr(spec, "draft_model_config", None)\n'
    "    if draft_config is None:\n"
    "        return False\n"
    '    return "DFlash2DraftModel" in (draft_config.architectures or [])\n'
)


def _statements_mean(statements: Sequence[cst.BaseStatement], source: str) -> bool:
    code = "".join(code_of(s) for s in statements)
    return bool(code.strip()) and same_meaning(code, source)


def _named(name: str) -> m.FunctionDef:
    return m.FunctionDef(name=m.Name(name))


# The helpers below are shared with the draft-logit-cache edit, which also
# inserts a method before an anchor method and judges an existing one.


def methods_named(cls: cst.ClassDef, name: str) -> list[cst.FunctionDef]:
    """Methods (properties included) of that name directly in the class body."""
    return [
        s
        for s in cls.body.body
        if isinstance(s, cst.FunctionDef) and s.name.value == name
    ]


def insert_method_before(
    body: Sequence[cst.BaseStatement],
    anchor: cst.BaseStatement,
    new: cst.FunctionDef,
) -> list[cst.BaseStatement]:
    """`body` with `new` placed right before `anchor`, separated as methods are.

    The new method takes the blank lines that separated the anchor from what
    preceded it; comments above the anchor stay with the anchor.
    """
    blanks: list[cst.EmptyLine] = []
    for line in anchor.leading_lines:
        if line.comment is not None:
            break
        blanks.append(line)
    anchor_lines = list(anchor.leading_lines)
    if not blanks:
        anchor_lines.insert(0, cst.EmptyLine(indent=False))
    out: list[cst.BaseStatement] = []
    for statement in body:
        if statement is anchor:
            out.append(new.with_changes(leading_lines=blanks))
            out.append(anchor.with_changes(leading_lines=anchor_lines))
        else:
            out.append(statement)
    return out


def how_method_differs(found: cst.FunctionDef, spec_source: str) -> str:
    """Where an existing method first departs from the spec's, in words."""
    spec = cst.parse_statement(spec_source)
    assert isinstance(spec, cst.FunctionDef)
    decorators = [meaning(d.decorator) for d in found.decorators]
    if decorators != [meaning(d.decorator) for d in spec.decorators]:
        shown = ", ".join(f"@{code_of(d.decorator)}" for d in found.decorators)
        return f"it is decorated {shown or 'with nothing'}"
    found_stub, spec_stub = _stub(found), _stub(spec)
    if not same_meaning(found_stub, spec_stub):
        return (
            f"its signature is {_header(found_stub)!r}, "
            f"the backport's {_header(spec_stub)!r}"
        )
    found_body, spec_body = _code_statements(found), _code_statements(spec)
    for ours, theirs in zip(found_body, spec_body):
        if not same_meaning(ours, theirs):
            return f"it has {describe(ours)} where the backport has {describe(theirs)}"
    if len(found_body) > len(spec_body):
        return f"it goes on with {describe(found_body[len(spec_body)])}"
    if len(found_body) < len(spec_body):
        return f"it lacks {describe(spec_body[len(found_body)])}"
    return "it differs"


def _stub(function: cst.FunctionDef) -> cst.FunctionDef:
    """The function's name and signature over an empty body."""
    return function.with_changes(
        decorators=(),
        leading_lines=(),
        body=cst.SimpleStatementSuite(body=[cst.Expr(cst.Ellipsis())]),
    )


def _header(stub: cst.FunctionDef) -> str:
    return " ".join(code_of(stub).split()).removesuffix(": ...")


def _code_statements(function: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The body's statements without a leading docstring."""
    body = list(function.body.body)
    first = body[0] if body else None
    if m.matches(first, m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])):
        return body[1:]
    return body


class SpeculatorSelection(BackportCodemod):
    EDIT = "speculator-selection"
    PATH = "vllm/v1/worker/gpu/spec_decode/__init__.py"
    DESCRIPTION = (
        "init_speculator returns DFlash2Speculator for a DFlash2DraftModel draft"
    )

    HUNK = "select the DFlash2 speculator"

    def backport(self, tree: cst.Module) -> cst.Module:
        functions = [s for s in tree.body if m.matches(s, _named(SELECTOR))]
        if len(functions) != 1:
            self.drift(
                self.HUNK,
                f"one module-level function {SELECTOR}()",
                f"{len(functions)}",
            )
            return tree
        (function,) = functions
        assert isinstance(function, cst.FunctionDef)

        arms = [
            arm for arm in self._arms(function) if same_meaning(arm.test, DFLASH_TEST)
        ]
        if len(arms) != 1:
            tests = ", ".join(describe(a.test) for a in self._arms(function)) or "none"
            self.drift(
                self.HUNK,
                f"one `if {DFLASH_TEST}:` arm in {SELECTOR}()",
                f"{len(arms)} such arms (the arms test {tests})",
            )
            return tree
        (arm,) = arms
        body = arm.body
        assert isinstance(body, cst.IndentedBlock)

        if _statements_mean(body.body, DFLASH2_ARM):
            self.applied(self.HUNK)
            return tree
        first = body.body[0] if body.body else None
        if isinstance(first, cst.If) and same_meaning(first.test, DFLASH2_TEST):
            self.drift(
                self.HUNK,
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
            return tree
        if not _statements_mean(body.body, DFLASH1_ARM):
            self.drift(
                self.HUNK,
                f"the dflash arm of {SELECTOR}() to import and return "
                "DFlashSpeculator(vllm_config, device), as in vLLM 0.27.1",
                self._arm_summary(body.body),
            )
            return tree
        # Selecting DFlash2 before the chain would make the inserted copy dead
        # code and leave two places to keep in step.
        if m.findall(
            function, m.If(test=m.MatchIfTrue(lambda t: same_meaning(t, DFLASH2_TEST)))
        ):
            self.drift(
                self.HUNK,
                "the DFlash2Speculator selection inside the dflash arm",
                f"a `{DFLASH2_TEST}` test elsewhere in {SELECTOR}(); move the "
                "DFlash2 selection first into the dflash arm",
            )
            return tree

        self.pending(self.HUNK)
        selection = self.statement(self._quoted(DFLASH2_SELECTION, arm.test))
        new_body = body.with_changes(body=[selection, *body.body])
        new_function = function.deep_replace(body, new_body)
        return tree.with_changes(
            body=[new_function if s is function else s for s in tree.body]
        )

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
                for n in m.findall(test, m.SimpleString())
                if string_value(n) == "dflash"
            ),
            None,
        )
        if isinstance(literal, cst.SimpleString) and literal.quote == "'":
            return source.replace('"', "'")
        return source


class V2RunnerForcing(BackportCodemod):
    EDIT = "speculator-selection"
    PATH = "vllm/config/vllm.py"
    DESCRIPTION = "a DFlash2 draft forces the V2 model runner"

    BRANCH_HUNK = "a DFlash2 draft forces the V2 model runner"
    HELPER_HUNK = "DFlash2 draft detection"

    def backport(self, tree: cst.Module) -> cst.Module:
        classes = [
            s for s in tree.body if m.matches(s, m.ClassDef(name=m.Name(CONFIG_CLASS)))
        ]
        if len(classes) != 1:
            found = f"{len(classes)} module-level classes of that name"
            for hunk in (self.BRANCH_HUNK, self.HELPER_HUNK):
                self.drift(hunk, f"one module-level class {CONFIG_CLASS}", found)
            return tree
        (cls,) = classes
        assert isinstance(cls, cst.ClassDef)

        # Both hunks are judged before anything changes, so that every drift
        # is reported and a drift in one leaves the other unwritten.
        branch = self._branch(cls)
        helper = self._helper(cls)
        if any(v.state is State.DRIFT for v in self.verdicts):
            return tree
        if branch is None and helper is None:
            return tree

        body: list[cst.BaseStatement] = list(cls.body.body)
        if branch is not None:
            old_runner, new_runner = branch
            body = [new_runner if s is old_runner else s for s in body]
        if helper is not None:
            anchor, new_helper = helper
            body = insert_method_before(body, anchor, new_helper)
        new_cls = cls.with_changes(body=cls.body.with_changes(body=body))
        return tree.with_changes(body=[new_cls if s is cls else s for s in tree.body])

    def _branch(
        self, cls: cst.ClassDef
    ) -> tuple[cst.FunctionDef, cst.FunctionDef] | None:
        """The `use_v2_model_runner` to swap in, if the branch is pending."""
        hunk = self.BRANCH_HUNK
        runners = methods_named(cls, RUNNER)
        if len(runners) != 1:
            self.drift(
                hunk,
                f"one method or property {CONFIG_CLASS}.{RUNNER}",
                f"{len(runners)}",
            )
            return None
        (runner,) = runners
        statements = list(runner.body.body)
        anchors = [i for i, s in enumerate(statements) if _is_branch(s, ANCHOR_BRANCH)]
        if len(anchors) != 1:
            self.drift(
                hunk,
                f"one `if self.{ANCHOR_METHOD}(): return True` branch in the "
                f"body of {CONFIG_CLASS}.{RUNNER}, to add the DFlash2 branch after",
                self._no_anchor(cls, runner, len(anchors)),
            )
            return None
        (index,) = anchors
        ours = [i for i, s in enumerate(statements) if _is_branch(s, DFLASH2_BRANCH)]
        if ours == [index + 1]:
            self.applied(hunk)
            return None
        if ours:
            self.drift(
                hunk,
                f"`if self.{HELPER}(): return True` right after the "
                f"`if self.{ANCHOR_METHOD}(): return True` branch",
                f"it elsewhere in {RUNNER}, "
                + (f"after {describe(statements[ours[0] - 1])}" if ours[0] else "first")
                + "; move it right after that branch, ahead of the checks "
                "that may return False",
            )
            return None

        self.pending(hunk)
        new_branch = self.statement(DFLASH2_BRANCH_SOURCE)
        # Parsed on its own, the separating blank line would be indented
        # (trailing spaces) once the branch sits inside the method.
        new_branch = new_branch.with_changes(
            leading_lines=[
                line.with_changes(indent=False) if line.comment is None else line
                for line in new_branch.leading_lines
            ]
        )
        statements.insert(index + 1, new_branch)
        assert isinstance(runner.body, cst.IndentedBlock)
        return runner, runner.with_changes(
            body=runner.body.with_changes(body=statements)
        )

    @staticmethod
    def _no_anchor(cls: cst.ClassDef, runner: cst.FunctionDef, count: int) -> str:
        if count:
            return f"{count} such branches"
        calls = m.Call(
            func=m.Attribute(value=m.Name("self"), attr=m.Name(ANCHOR_METHOD))
        )
        own = [s for s in runner.body.body if m.findall(s, calls)]
        if own:
            return f"{ANCHOR_METHOD} used another way: {describe(own[0], 80)}"
        callers = [
            s.name.value
            for s in cls.body.body
            if isinstance(s, cst.FunctionDef)
            and s is not runner
            and m.findall(s, calls)
        ]
        if callers:
            return (
                f"no such branch: this vLLM consults {ANCHOR_METHOD} in "
                f"{', '.join(callers)} instead, so it decides when to force the "
                f"V2 model runner outside {RUNNER} and the branch has no place "
                "to go"
            )
        return f"no such branch, and nothing in {CONFIG_CLASS} calls {ANCHOR_METHOD}"

    def _helper(
        self, cls: cst.ClassDef
    ) -> tuple[cst.FunctionDef, cst.FunctionDef] | None:
        """The anchor and the method to insert before it, if the helper is pending."""
        hunk = self.HELPER_HUNK
        helpers = methods_named(cls, HELPER)
        if len(helpers) > 1:
            self.drift(hunk, f"at most one {CONFIG_CLASS}.{HELPER}", f"{len(helpers)}")
            return None
        if helpers:
            if same_meaning(helpers[0], HELPER_SOURCE):
                self.applied(hunk)
            else:
                self.drift(
                    hunk,
                    f"{CONFIG_CLASS}.{HELPER} to test the draft's architectures "
                    'for "DFlash2DraftModel" as the backport does',
                    f"a {HELPER} that differs: "
                    f"{how_method_differs(helpers[0], HELPER_SOURCE)}; remove or "
                    "rename it",
                )
            return None
        anchors = methods_named(cls, ANCHOR_METHOD)
        if len(anchors) != 1:
            self.drift(
                hunk,
                f"one method {CONFIG_CLASS}.{ANCHOR_METHOD} to add {HELPER} before",
                f"{len(anchors)}",
            )
            return None
        self.pending(hunk)
        new_helper = self.statement(HELPER_SOURCE)
        assert isinstance(new_helper, cst.FunctionDef)
        return anchors[0], new_helper


def _is_branch(statement: cst.BaseStatement, source: str) -> bool:
    return (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and same_meaning(statement, source)
    )
