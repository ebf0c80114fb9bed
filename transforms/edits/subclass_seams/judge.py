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

import ast
import dataclasses
import textwrap
from typing import NamedTuple

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles
from ...framework.judging import is_attribute
from ...framework.meaning import meaning, same_meaning
from ...framework.names import class_bindings, may_bind, module_bindings
from ...framework.source import Found, Path, Source
from ...framework.vocabulary import State

#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)

_WHY = (
    "`decoder_layer_cls` and `model_cls` let DFlash2 substitute its own layer "
    "and model instead of copying the DFlash1 model."
)
LAYER_ATTRIBUTE = HUNKS.hunk(
    "decoder_layer_cls attribute",
    "class DFlashQwen3Model, first in its body",
    _WHY,
)
LAYERS = HUNKS.hunk(
    "layers via decoder_layer_cls",
    "DFlashQwen3Model.__init__, the one `self.layers = ...`",
    _WHY,
)
MODEL_ATTRIBUTE = HUNKS.hunk(
    "model_cls attribute",
    "class DFlashQwen3ForCausalLM, first in its body",
    _WHY,
)
MODEL = HUNKS.hunk(
    "model via model_cls",
    "DFlashQwen3ForCausalLM.__init__, the one `self.model = ...`",
    _WHY,
)


class Seam(NamedTuple):
    owner: str  # the class that gains the attribute
    attribute: str
    value: str  # the class 0.27.1 hard-codes; also the attribute's value
    target: str  # what the construction is assigned to, e.g. `self.layers`
    #: The constructor is the element of a list comprehension, the one
    #: argument of the call assigned (`nn.ModuleList([... for ...])`).
    in_list: bool
    attribute_hunk: Hunk
    construction_hunk: Hunk

    @property
    def seam(self) -> str:
        return f"self.{self.attribute}"


LAYER_SEAM = Seam(
    "DFlashQwen3Model", "decoder_layer_cls", "DFlashQwen3DecoderLayer",
    "self.layers", True, LAYER_ATTRIBUTE, LAYERS,
)  # fmt: skip
MODEL_SEAM = Seam(
    "DFlashQwen3ForCausalLM", "model_cls", "DFlashQwen3Model",
    "self.model", False, MODEL_ATTRIBUTE, MODEL,
)  # fmt: skip
SEAMS = (LAYER_SEAM, MODEL_SEAM)


@dataclasses.dataclass(kw_only=True, eq=False)
class Attribute(Site):
    """The first statement of the class body: the attribute goes first in the
    class (after a docstring), and a removed one that stood there gives its
    blank lines back to what follows. Applied, every statement of the body
    that binds the attribute."""

    attribute: str
    value: str
    bindings: tuple[Path, ...] = ()


@dataclasses.dataclass(kw_only=True, eq=False)
class Construction(Site):
    """The assignment whose constructor the seam reroutes."""

    in_list: bool
    #: What the constructor becomes.
    callee: str


def judge(source: Source) -> dict[str, Judged]:
    judged: dict[str, Judged] = {}
    for seam in SEAMS:
        owner = exactly_one(
            source.module.classes(seam.owner), f"one module-level class {seam.owner}"
        )
        if isinstance(owner, Judged):
            judged[seam.attribute_hunk.name] = judged[seam.construction_hunk.name] = owner
            continue
        judged[seam.attribute_hunk.name] = _attribute(seam, source, owner)
        judged[seam.construction_hunk.name] = _construction(seam, source, owner)
    # In the declared order.
    return {h.name: judged[h.name] for h in (LAYER_ATTRIBUTE, LAYERS, MODEL_ATTRIBUTE, MODEL)}


def _attribute(seam: Seam, source: Source, owner: Found) -> Judged:
    """The attribute, bound in the class body to the class 0.27.1 names."""
    expected = f"`{seam.attribute} = {seam.value}` in class {seam.owner}"
    bindings = class_bindings(owner, seam.attribute)
    for binding in bindings:
        node = binding.node
        if isinstance(node, ast.Assign | ast.AnnAssign):
            if node.value is not None and same_meaning(node.value, seam.value):
                continue
            found = f"{source.describe(node)}; point it at {seam.value} or drop it"
        else:
            kind = "method" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else "class"
            found = f"a {kind} named {seam.attribute}; rename it"
        return drift(expected, found)
    site = Attribute(
        # Not pinned to what it means: the construction, rewritten first, may
        # stand there.
        path=owner.statements()[0].path,
        attribute=seam.attribute,
        value=seam.value,
        bindings=tuple(b.pinned() for b in bindings),
    )
    if bindings:
        return applied(site)
    # The attribute reads its value when the class is created, so the value
    # must already exist by then.
    body = source.tree.body
    above = module_bindings(body[: body.index(owner.node)])  # type: ignore[arg-type]
    if not may_bind(above, seam.value):
        return drift(
            f"{seam.value} defined or imported above class {seam.owner} "
            f"(the new `{seam.attribute}` reads it when the class is created)",
            "it only below the class or not at all; move its definition or "
            "import above the class",
        )
    return pending(site)


def _constructor(seam: Seam, value: ast.expr | None) -> ast.Call | None:
    """The call that builds the layer (inside the list) or the model."""
    if not seam.in_list:
        return value if isinstance(value, ast.Call) else None
    if (
        isinstance(value, ast.Call)
        and len(value.args) == 1
        and not value.keywords
        and isinstance(value.args[0], ast.ListComp)
        and isinstance(value.args[0].elt, ast.Call)
    ):
        return value.args[0].elt
    return None


def _construction(seam: Seam, source: Source, owner: Found) -> Judged:
    """The construction, as 0.27.1 writes it but for the class it calls."""
    where = f"{seam.owner}.__init__"
    init = exactly_one(owner.defs("__init__"), f"one {where}")
    if isinstance(init, Judged):
        return init
    attribute = seam.target.split(".")[1]
    assignment = exactly_one(
        init.walk(
            lambda s: isinstance(s, ast.Assign)
            and any(is_attribute(t, "self", attribute) for t in s.targets)
        ),
        f"one `{seam.target} = ...` in {where}",
    )
    if isinstance(assignment, Judged):
        return assignment
    node = assignment.node
    assert isinstance(node, ast.Assign)
    call = _constructor(seam, node.value)
    if call is None:
        return drift(
            f"{where} to build {seam.target} with {seam.value}(...)", source.describe(node)
        )

    if same_meaning(call.func, seam.value):
        judged = pending(Construction(path=assignment.pinned(), in_list=seam.in_list, callee=seam.seam))
    elif same_meaning(call.func, seam.seam):
        judged = applied(Construction(path=assignment.pinned(), in_list=seam.in_list, callee=seam.value))
    else:
        return drift(
            f"{where} to build {seam.target} with {seam.value}(...) or {seam.seam}(...)",
            f"{_outline(node, call)}; a subclass would not get its own class through "
            f"{seam.seam}",
        )

    spec = Source(textwrap.dedent(seam.construction_hunk.before or ""))
    (spec_assignment,) = spec.tree.body
    assert isinstance(spec_assignment, ast.Assign)
    spec_call = _constructor(seam, spec_assignment.value)
    assert spec_call is not None
    if _canonical(node, call, seam.value) != _canonical(spec_assignment, spec_call, seam.value):
        remedy = "bring it back to 0.27.1's" + (
            f" or route the construction through {seam.seam} by hand"
            if judged.state is State.PENDING
            else ""
        )
        return drift(
            f"{seam.target} built as in 0.27.1 apart from the class",
            f"{_argument_difference(source, call, spec, spec_call, node)}; {remedy}",
        )
    return judged


def _canonical(assignment: ast.Assign, call: ast.Call, callee: str) -> str:
    """The assignment with `callee` as constructor and keywords in name order.

    Keyword order changes nothing here (every argument is a plain read), so
    `prefix=..., vllm_config=...` means the same as the reverse.
    """
    func, keywords = call.func, call.keywords
    call.func = ast.Name(id=callee, ctx=ast.Load())
    if not any(isinstance(a, ast.Starred) for a in call.args) and all(
        k.arg is not None for k in keywords
    ):
        call.keywords = sorted(keywords, key=lambda k: k.arg or "")
    try:
        return meaning(assignment)
    finally:
        call.func, call.keywords = func, keywords


def _argument_difference(
    source: Source, found: ast.Call, spec: Source, expected: ast.Call, around: ast.Assign
) -> str:
    """The constructor arguments that differ, in words; else the code around."""
    keywords = {k.arg: k.value for k in found.keywords if k.arg}
    expected_keywords = {k.arg: k.value for k in expected.keywords if k.arg}
    differences = []
    if len(found.args) != len(expected.args) or not all(
        same_meaning(a, b) for a, b in zip(found.args, expected.args)
    ):
        differences.append(
            f"positional arguments {_tuple(source, found.args)} instead of "
            f"{_tuple(spec, expected.args)}"
        )
    for name, value in expected_keywords.items():
        if name not in keywords:
            differences.append(f"no {name}= argument")
        elif not same_meaning(keywords[name], value):
            differences.append(
                f"{name}={source.describe(keywords[name])} instead of {spec.describe(value)}"
            )
    differences.extend(
        f"an extra {name}={source.describe(value)}"
        for name, value in keywords.items()
        if name not in expected_keywords
    )
    if differences:
        return "; ".join(differences)
    return f"the same arguments in other code around them: {_outline(around, found)}"


def _tuple(source: Source, values: list[ast.expr]) -> str:
    texts = [" ".join(source.segment(v).split()) for v in values]
    return repr("(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")")


def _outline(assignment: ast.Assign, call: ast.Call) -> str:
    """The assignment on one line, with the constructor's arguments elided."""
    args, keywords = call.args, call.keywords
    call.args, call.keywords = [ast.Constant(value=...)], []
    try:
        text = " ".join(ast.unparse(assignment).split())
    finally:
        call.args, call.keywords = args, keywords
    return repr(text if len(text) <= 120 else text[:117] + "...")


SUBCLASS_SEAMS = Edit(
    "subclass-seams",
    "vllm/model_executor/models/qwen3_dflash.py",
    "DFlashQwen3Model.decoder_layer_cls and DFlashQwen3ForCausalLM.model_cls "
    "let subclasses swap in their own decoder layer and model",
    Role.SEAM,
    (LAYER_ATTRIBUTE, LAYERS, MODEL_ATTRIBUTE, MODEL),
    judge,
    writer="subclass_seams:SubclassSeams",
)
