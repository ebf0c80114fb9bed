"""Edit 2, subclass seams: DFlash2 swaps its own layer and model into DFlash1's.

Targets, in the DFlash1 model module:
- class `DFlashQwen3Model` and, in its `__init__`,
      self.layers = nn.ModuleList([DFlashQwen3DecoderLayer(...) for ...])
- class `DFlashQwen3ForCausalLM` and, in its `__init__`,
      self.model = DFlashQwen3Model(vllm_config=..., prefix=..., ...)

Inserts, first in each class body (after a docstring, if any), a class
attribute naming the class that 0.27.1 hard-codes:
    decoder_layer_cls = DFlashQwen3DecoderLayer
    model_cls = DFlashQwen3Model
and routes the two constructions through it, arguments untouched:
    self.decoder_layer_cls(...)        self.model_cls(...)

Why: the DFlash2 model subclasses these two classes and only needs another
decoder layer and another inner model; with the seams it overrides two class
attributes instead of copying 700 lines to change two names.

Each of the four hunks is judged on its own. An attribute counts as applied
wherever it sits in the class body, as long as it names the expected class; a
construction counts as applied when it goes through the seam and otherwise
means what 0.27.1's does (keyword order aside). Another class, another value,
other arguments or a missing construction is drift: a subclass relying on
the seam would silently get the wrong layer or model.

Reverted, the applied hunks are undone one by one: every binding of an
attribute goes, and a rerouted construction names 0.27.1's class again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from dflash2_backport.verdicts import State

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    exactly_one,
    leading_blank_lines,
    pending,
    placed_before,
    replaced,
)
from ._meaning import describe, find_all, is_attribute, is_docstring, same_meaning
from ._names import class_bindings, may_bind, members_named, module_bindings, named
from .hunks import LAYER_CONSTRUCTION, MODEL_CONSTRUCTION, SUBCLASS_SEAMS


@dataclasses.dataclass(frozen=True)
class Seam:
    owner: str  # the class that gains the attribute
    attribute: str
    value: str  # the class 0.27.1 hard-codes; also the attribute's value
    target: str  # what the construction is assigned to, e.g. `self.layers`
    # 0.27.1's whole assignment; the seam changes only the constructor.
    construction: str
    attribute_hunk: str
    construction_hunk: str

    @property
    def seam(self) -> str:
        return f"self.{self.attribute}"


LAYER_SEAM = Seam(
    owner="DFlashQwen3Model",
    attribute="decoder_layer_cls",
    value="DFlashQwen3DecoderLayer",
    target="self.layers",
    construction=LAYER_CONSTRUCTION,
    attribute_hunk=SUBCLASS_SEAMS.hunks[0].name,
    construction_hunk=SUBCLASS_SEAMS.hunks[1].name,
)

MODEL_SEAM = Seam(
    owner="DFlashQwen3ForCausalLM",
    attribute="model_cls",
    value="DFlashQwen3Model",
    target="self.model",
    construction=MODEL_CONSTRUCTION,
    attribute_hunk=SUBCLASS_SEAMS.hunks[2].name,
    construction_hunk=SUBCLASS_SEAMS.hunks[3].name,
)

SEAMS = (LAYER_SEAM, MODEL_SEAM)


# -- finding things ---------------------------------------------------------


def _constructor(seam: Seam, value: cst.BaseExpression) -> cst.Call | None:
    """The call that builds the layer (inside the list) or the model."""
    if seam is LAYER_SEAM:
        if (
            isinstance(value, cst.Call)
            and len(value.args) == 1
            and isinstance(value.args[0].value, cst.ListComp)
            and isinstance(value.args[0].value.elt, cst.Call)
        ):
            assert isinstance(value, cst.Call)
            element = value.args[0].value
            assert isinstance(element, cst.ListComp)
            assert isinstance(element.elt, cst.Call)
            return element.elt
        return None
    return value if isinstance(value, cst.Call) else None


def _canonical(assignment: cst.Assign, call: cst.Call, callee: str) -> cst.Assign:
    """The assignment with `callee` as constructor and keywords in name order.

    Keyword order changes nothing here (every argument is a plain read), so
    `prefix=..., vllm_config=...` means the same as the reverse.
    """
    if any(arg.star for arg in call.args):
        args = call.args
    else:
        positional = [a for a in call.args if a.keyword is None]
        keywords = sorted(
            (a for a in call.args if a.keyword is not None),
            key=lambda a: a.keyword.value if a.keyword else "",
        )
        args = (*positional, *keywords)
    canonical = call.with_changes(func=cst.Name(callee), args=args)
    result = assignment.deep_replace(call, canonical)
    assert isinstance(result, cst.Assign)
    return result


def _argument_difference(
    found: cst.Call, expected: cst.Call, around: cst.Assign
) -> str:
    """The constructor arguments that differ, in words; else the code around."""
    positional = [a.value for a in found.args if a.keyword is None]
    expected_positional = [a.value for a in expected.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in found.args if a.keyword}
    expected_keywords = {a.keyword.value: a.value for a in expected.args if a.keyword}
    differences = []
    if len(positional) != len(expected_positional) or not all(
        same_meaning(a, b) for a, b in zip(positional, expected_positional)
    ):
        differences.append(
            "positional arguments "
            + describe(cst.Tuple([cst.Element(v) for v in positional]))
            + " instead of "
            + describe(cst.Tuple([cst.Element(v) for v in expected_positional]))
        )
    for name, value in expected_keywords.items():
        if name not in keywords:
            differences.append(f"no {name}= argument")
        elif not same_meaning(keywords[name], value):
            differences.append(
                f"{name}={describe(keywords[name])} instead of {describe(value)}"
            )
    differences.extend(
        f"an extra {name}={describe(value)}"
        for name, value in keywords.items()
        if name not in expected_keywords
    )
    if differences:
        return "; ".join(differences)
    return f"the same arguments in other code around them: {_outline(around, found)}"


def _outline(assignment: cst.Assign, call: cst.Call) -> str:
    """The assignment on one line, with the constructor's arguments elided."""
    elided = assignment.deep_replace(
        call,
        call.with_changes(
            args=[cst.Arg(cst.Ellipsis())],
            whitespace_before_args=cst.SimpleWhitespace(""),
        ),
    )
    assert isinstance(elided, cst.CSTNode)
    return describe(elided, 120)


def _spec_assignment(seam: Seam) -> tuple[cst.Assign, cst.Call]:
    line = cst.parse_statement(seam.construction)
    assert isinstance(line, cst.SimpleStatementLine)
    assignment = line.body[0]
    assert isinstance(assignment, cst.Assign)
    call = _constructor(seam, assignment.value)
    assert call is not None
    return assignment, call


# -- the codemod ------------------------------------------------------------


class SubclassSeams(BackportCodemod):
    SPEC = SUBCLASS_SEAMS

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        judged: dict[str, Judged] = {}
        for seam in SEAMS:
            owner = exactly_one(
                named(tree.body, cst.ClassDef, seam.owner),
                f"one module-level class {seam.owner}",
            )
            if isinstance(owner, Judged):
                judged[seam.attribute_hunk] = judged[seam.construction_hunk] = owner
                continue
            judged[seam.attribute_hunk] = self._judge_attribute(seam, tree, owner)
            judged[seam.construction_hunk] = self._judge_construction(seam, owner)
        return judged

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        return self._rewrite(
            tree, sites, lambda seam: seam.seam, self._insert_attribute
        )

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        return self._rewrite(
            tree, sites, lambda seam: seam.value, self._remove_attribute
        )

    # -- verdicts -----------------------------------------------------------

    def _judge_attribute(
        self, seam: Seam, tree: cst.Module, owner: cst.ClassDef
    ) -> Judged:
        """The attribute, bound in the class body to the class 0.27.1 names;
        the site is the class."""
        expected = f"`{seam.attribute} = {seam.value}` in class {seam.owner}"
        bindings = class_bindings(owner, seam.attribute)
        for binding in bindings:
            if isinstance(binding, cst.Assign | cst.AnnAssign):
                if binding.value is not None and same_meaning(
                    binding.value, seam.value
                ):
                    continue
                found = f"{describe(binding)}; point it at {seam.value} or drop it"
            else:
                found = (
                    f"a {'method' if isinstance(binding, cst.FunctionDef) else 'class'}"
                    f" named {seam.attribute}; rename it"
                )
            return drift(expected, found)
        if bindings:
            return applied(owner)
        # The attribute reads its value when the class is created, so the
        # value must already exist by then.
        above = module_bindings(tree.body[: tree.body.index(owner)])
        if not may_bind(above, seam.value):
            return drift(
                f"{seam.value} defined or imported above class {seam.owner} "
                f"(the new `{seam.attribute}` reads it when the class is created)",
                "it only below the class or not at all; move its definition or "
                "import above the class",
            )
        return pending(owner)

    def _judge_construction(self, seam: Seam, owner: cst.ClassDef) -> Judged:
        """The construction, as 0.27.1 writes it but for the class it calls;
        the site is the class, its `__init__` and the constructor call."""
        where = f"{seam.owner}.__init__"
        init = exactly_one(
            members_named(owner, cst.FunctionDef, "__init__"), f"one {where}"
        )
        if isinstance(init, Judged):
            return init
        attribute = seam.target.split(".")[1]
        assignment = exactly_one(
            find_all(
                init,
                lambda n: isinstance(n, cst.Assign)
                and any(is_attribute(t.target, "self", attribute) for t in n.targets),
            ),
            f"one `{seam.target} = ...` in {where}",
        )
        if isinstance(assignment, Judged):
            return assignment
        assert isinstance(assignment, cst.Assign)
        call = _constructor(seam, assignment.value)
        if call is None:
            return drift(
                f"{where} to build {seam.target} with {seam.value}(...)",
                describe(assignment),
            )

        if same_meaning(call.func, seam.value):
            judged = pending((owner, init, call))
        elif same_meaning(call.func, seam.seam):
            judged = applied((owner, init, call))
        else:
            return drift(
                f"{where} to build {seam.target} with {seam.value}(...) or "
                f"{seam.seam}(...)",
                f"{_outline(assignment, call)}; a subclass would not get its own "
                f"class through {seam.seam}",
            )

        spec_assignment, spec_call = _spec_assignment(seam)
        if not same_meaning(
            _canonical(assignment, call, seam.value),
            _canonical(spec_assignment, spec_call, seam.value),
        ):
            remedy = "bring it back to 0.27.1's" + (
                f" or route the construction through {seam.seam} by hand"
                if judged.state is State.PENDING
                else ""
            )
            return drift(
                f"{seam.target} built as in 0.27.1 apart from the class",
                f"{_argument_difference(call, spec_call, assignment)}; {remedy}",
            )
        return judged

    # -- rewriting ----------------------------------------------------------

    def _rewrite(
        self,
        tree: cst.Module,
        sites: dict,
        callee: Callable[[Seam], str],
        attribute: Callable[[Seam, cst.ClassDef], cst.ClassDef],
    ) -> cst.Module:
        """Each class with its construction calling `callee(seam)` and its
        attribute rewritten by `attribute`, where those hunks are in `sites`."""
        replacements: dict[cst.ClassDef, cst.ClassDef] = {}
        for seam in SEAMS:
            owner = original = None
            if seam.construction_hunk in sites:
                owner = original = sites[seam.construction_hunk][0]
                _, init, call = sites[seam.construction_hunk]
                rerouted = call.with_changes(
                    func=cst.parse_expression(
                        callee(seam), config=self.module.config_for_parsing
                    )
                )
                # Only `__init__` is walked: the class around it is large.
                new_init = init.deep_replace(call, rerouted)
                block = owner.body
                assert isinstance(block, cst.IndentedBlock)
                owner = owner.with_changes(
                    body=block.with_changes(body=replaced(block.body, init, new_init))
                )
            if seam.attribute_hunk in sites:
                original = sites[seam.attribute_hunk]
                owner = attribute(seam, owner if owner is not None else original)
            if owner is not None:
                replacements[original] = owner
        return tree.with_changes(body=[replacements.get(s, s) for s in tree.body])

    def _insert_attribute(self, seam: Seam, owner: cst.ClassDef) -> cst.ClassDef:
        block = owner.body
        assert isinstance(block, cst.IndentedBlock)
        members = list(block.body)
        attribute = self.statement(f"{seam.attribute} = {seam.value}\n")
        # First in the class, after its docstring: the attribute takes over
        # the blank lines before the member that used to open the class.
        position = 1 if members and is_docstring(members[0]) else 0
        if position < len(members):
            members[position : position + 1] = placed_before(
                members[position], [attribute]
            )
        else:
            members.append(attribute)
        return owner.with_changes(body=block.with_changes(body=members))

    def _remove_attribute(self, seam: Seam, owner: cst.ClassDef) -> cst.ClassDef:
        """The class without any binding of the attribute; where
        `_insert_attribute` put it, the member after it gets its blank lines back."""
        block = owner.body
        assert isinstance(block, cst.IndentedBlock)
        bindings = {id(binding) for binding in class_bindings(owner, seam.attribute)}
        docstring = 1 if block.body and is_docstring(block.body[0]) else 0
        members: list[cst.BaseStatement] = []
        # Where the removed line stood (first in the class or not) and the
        # blank lines above it, for the member that follows it.
        gap: tuple[bool, list[cst.EmptyLine]] | None = None
        for member in block.body:
            if isinstance(member, cst.SimpleStatementLine):
                kept = [small for small in member.body if id(small) not in bindings]
                if not kept:
                    # Comments above the attribute go with it.
                    if gap is None:
                        blank, _ = leading_blank_lines(member.leading_lines)
                        gap = (len(members) == docstring, blank)
                    continue
                if len(kept) < len(member.body):
                    last = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                    member = member.with_changes(body=[*kept[:-1], last])
            if gap is not None:
                member = _separated(member, *gap)
                gap = None
            members.append(member)
        return owner.with_changes(body=block.with_changes(body=members))


def _separated(
    member: cst.BaseStatement, first: bool, removed: list[cst.EmptyLine]
) -> cst.BaseStatement:
    """The member that followed a removed line, separated from what precedes.

    Where the edit inserts (first in the class, after any docstring), it takes
    the removed line's blank lines, as `placed_before` gave them away; anywhere
    else it keeps the wider of the two separations.
    """
    blank, rest = leading_blank_lines(member.leading_lines)
    if first or len(removed) > len(blank):
        blank = removed
    return member.with_changes(leading_lines=[*blank, *rest])
