"""The quick judge: the hunks of `hunks.py` judged with Python's own parser.

`check` runs this alone: Python's C parser reads the seven files several
times faster than libcst does, and libcst is not even imported. It is sure
only of the plain cases. For each hunk it answers APPLIED, PENDING or None,
and None means "ask the codemod": drift and anything unusual (a shared line,
an `else: if`, a star import) go to the libcst codemods, which judge the file
again and say what they found, in the words users see.

It judges what the codemods judge, from the same declarations, by the same
meaning (Python's AST without docstrings), in the apply direction. Where both
run, `judge.py` holds them to the same answer, and the unit tables run every
case through both, so a quick answer cannot differ from the codemod's.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from collections.abc import Callable, Iterator, Sequence

from dflash2_backport.verdicts import State

from . import hunks as spec

Verdicts = dict[str, "State | None"]
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
APPLIED, PENDING = State.APPLIED, State.PENDING


# -- meaning ------------------------------------------------------------------


def strip_docstrings(tree: ast.AST) -> ast.AST:
    """The tree without docstrings, as `_meaning.py` compares code."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, *_DEFS)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False)


def dump_all(statements: Sequence[ast.stmt]) -> str:
    return dump(ast.Module(body=list(statements), type_ignores=[]))


@functools.cache
def _parsed(source: str) -> ast.Module:
    tree = ast.parse(textwrap.dedent(source).strip("\n") + "\n")
    assert isinstance(tree, ast.Module)
    return strip_docstrings(tree)  # type: ignore[return-value]


@functools.cache
def statement(source: str) -> str:
    (only,) = _parsed(source).body
    return dump(only)


@functools.cache
def statements(source: str) -> str:
    return dump_all(_parsed(source).body)


@functools.cache
def expression(source: str) -> str:
    return dump(ast.parse(source.strip(), mode="eval").body)


def means(node: ast.AST, source: str) -> bool:
    return dump(node) == statement(source)


# -- finding ------------------------------------------------------------------


def defs(body: Sequence[ast.stmt], name: str) -> list[ast.stmt]:
    return [s for s in body if isinstance(s, _DEFS) and s.name == name]


def classes(body: Sequence[ast.stmt], name: str) -> list[ast.ClassDef]:
    return [s for s in body if isinstance(s, ast.ClassDef) and s.name == name]


def only(found: Sequence[ast.stmt]) -> ast.stmt | None:
    """The one thing found; None (ask the codemod) for none or several."""
    return found[0] if len(found) == 1 else None


def is_self_attribute(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list in the subtree."""
    for inner in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(inner, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def shares_a_line(block: Sequence[ast.stmt], index: int) -> bool:
    """Whether the statement shares a line with its neighbour (`a; b`): libcst
    sees one statement line there, Python two statements."""
    statement = block[index]
    before = index > 0 and block[index - 1].end_lineno == statement.lineno
    after = index + 1 < len(block) and block[index + 1].lineno == statement.end_lineno
    return before or after


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Starred):
        target = target.value
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _target_names(e)]
    return []


def module_bindings(body: Sequence[ast.stmt]) -> dict[str, list[str]]:
    """Names the module-level statements bind, with each binding's origin,
    as `_names.module_bindings` counts them."""
    found: dict[str, list[str]] = {}

    def visit(statements: Sequence[ast.stmt]) -> None:
        for s in statements:
            if isinstance(s, (ast.ClassDef, *_DEFS)):
                found.setdefault(s.name, []).append("")
            elif isinstance(s, ast.Try):
                visit(s.body)
                for handler in s.handlers:
                    visit(handler.body)
                visit(s.orelse)
                visit(s.finalbody)
            elif isinstance(s, ast.Import):
                for alias in s.names:
                    head = alias.name.split(".")[0]
                    bound, origin = (
                        (alias.asname, alias.name) if alias.asname else (head, head)
                    )
                    found.setdefault(bound, []).append(origin)
            elif isinstance(s, ast.ImportFrom):
                module = "." * s.level + (s.module or "")
                for alias in s.names:
                    if alias.name == "*":
                        found.setdefault("*", []).append(module)
                    else:
                        bound = alias.asname or alias.name
                        found.setdefault(bound, []).append(f"{module}.{alias.name}")
            elif isinstance(s, ast.Assign):
                for target in s.targets:
                    for name in _target_names(target):
                        found.setdefault(name, []).append("")
            elif isinstance(s, ast.AnnAssign | ast.AugAssign):
                for name in _target_names(s.target):
                    found.setdefault(name, []).append("")

    visit(body)
    return found


def _alone(body: Sequence[ast.stmt], test: Callable[[ast.stmt], bool]) -> bool:
    """Whether a module-level statement passes `test` on a line of its own."""
    return any(test(s) and not shares_a_line(body, i) for i, s in enumerate(body))


# -- the edits ----------------------------------------------------------------


def causality(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    (hunk,) = spec.CAUSALITY.hunks
    function = only(defs(tree.body, spec.CAUSAL_FUNCTION))
    state = None
    if function is not None:
        state = (
            APPLIED
            if means(function, hunk.after)
            else PENDING
            if means(function, hunk.before)
            else None
        )
    return {hunk.name: state}


def _constructor(value: ast.expr, in_list: bool) -> ast.Call | None:
    if not in_list:
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


def _canonical(assignment: ast.Assign, call: ast.Call, callee: str) -> str:
    """The assignment with `callee` as constructor and keywords in name order,
    as the codemod compares constructions."""
    func, keywords = call.func, call.keywords
    call.func = ast.Name(id=callee, ctx=ast.Load())
    if not any(isinstance(a, ast.Starred) for a in call.args) and all(
        k.arg is not None for k in keywords
    ):
        call.keywords = sorted(keywords, key=lambda k: k.arg or "")
    try:
        return dump(assignment)
    finally:
        call.func, call.keywords = func, keywords


def _spec_construction(source: str, in_list: bool) -> tuple[ast.Assign, ast.Call]:
    (assignment,) = ast.parse(source).body
    assert isinstance(assignment, ast.Assign)
    call = _constructor(assignment.value, in_list)
    assert call is not None
    return assignment, call


def subclass_seams(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    attribute_layer, layers, attribute_model, model = spec.SUBCLASS_SEAMS.hunks
    seams = (
        ("DFlashQwen3Model", "decoder_layer_cls", "DFlashQwen3DecoderLayer",
         "layers", True, attribute_layer, layers),
        ("DFlashQwen3ForCausalLM", "model_cls", "DFlashQwen3Model",
         "model", False, attribute_model, model),
    )  # fmt: skip
    verdicts: Verdicts = {}
    for owner_name, attribute, value, target, in_list, attribute_hunk, hunk in seams:
        verdicts[attribute_hunk.name] = verdicts[hunk.name] = None
        owner = only(classes(tree.body, owner_name))
        if owner is None:
            continue
        assert isinstance(owner, ast.ClassDef)
        verdicts[attribute_hunk.name] = _seam_attribute(tree, owner, attribute, value)
        init = only(defs(owner.body, "__init__"))
        if init is None:
            continue
        assignments = [
            node
            for node in ast.walk(init)
            if isinstance(node, ast.Assign)
            and any(is_self_attribute(t, target) for t in node.targets)
        ]
        if len(assignments) != 1:
            continue
        (assignment,) = assignments
        call = _constructor(assignment.value, in_list)
        if call is None:
            continue
        if dump(call.func) == expression(value):
            state = PENDING
        elif dump(call.func) == expression(f"self.{attribute}"):
            state = APPLIED
        else:
            continue
        expected, expected_call = _spec_construction(hunk.before, in_list)
        if _canonical(assignment, call, value) == _canonical(
            expected, expected_call, value
        ):
            verdicts[hunk.name] = state
    return verdicts


def _seam_attribute(
    tree: ast.Module, owner: ast.ClassDef, attribute: str, value: str
) -> State | None:
    bindings = []
    for member in owner.body:
        if isinstance(member, (ast.ClassDef, *_DEFS)) and member.name == attribute:
            return None
        if isinstance(member, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == attribute for t in member.targets
        ):
            bindings.append(member.value)
        if (
            isinstance(member, ast.AnnAssign)
            and isinstance(member.target, ast.Name)
            and member.target.id == attribute
        ):
            bindings.append(member.value)
    if bindings:
        same = all(b is not None and dump(b) == expression(value) for b in bindings)
        return APPLIED if same else None
    above = tree.body[: tree.body.index(owner)]
    # Only plain definitions and imports: a star import may bind the name,
    # and the codemod decides that case.
    bound = any(
        (isinstance(s, (ast.ClassDef, *_DEFS)) and s.name == value)
        or (
            isinstance(s, ast.ImportFrom | ast.Import)
            and any((a.asname or a.name) == value for a in s.names)
        )
        for s in above
    )
    return PENDING if bound else None


def _string_keyed(table: ast.Dict, key: str) -> list[int]:
    return [
        i
        for i, k in enumerate(table.keys)
        if isinstance(k, ast.Constant) and k.value == key and isinstance(k.value, str)
    ]


def registry(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    (hunk,) = spec.REGISTRY.hunks
    verdicts: Verdicts = {hunk.name: None}
    tables = []
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.Assign | ast.AnnAssign) and isinstance(
            statement.value, ast.Dict
        ):
            if shares_a_line(tree.body, index):
                return verdicts
            tables.append(statement.value)
    with_anchor = [t for t in tables if _string_keyed(t, spec.ANCHOR_KEY)]
    if len(with_anchor) != 1:
        return verdicts
    (table,) = with_anchor
    entries = [
        (other, other.values[i])
        for other in tables
        for i in _string_keyed(other, spec.ENTRY_KEY)
    ]
    if any(dump(value) != expression(spec.ENTRY_VALUE) for _, value in entries):
        return verdicts
    if entries:
        if any(other is table for other, _ in entries):
            verdicts[hunk.name] = APPLIED
        return verdicts
    anchor = table.values[_string_keyed(table, spec.ANCHOR_KEY)[0]]
    if dump(anchor) == expression(spec.ANCHOR_VALUE):
        verdicts[hunk.name] = PENDING
    return verdicts


def _same_or_absent(found: Sequence[ast.stmt], source: str) -> bool:
    return all(means(f, source) for f in found)


def vocab_parallel_topk(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    imports, helpers, method = spec.VOCAB_PARALLEL_TOPK.hunks
    body = tree.body
    bindings = module_bindings(body)
    verdicts: Verdicts = {}

    origins = {name: set(bindings.get(name, [])) for name in spec.TOPK_IMPORTS}
    wrong = any(
        found and found != {f"{module}.{name}"}
        for name, (module, _) in spec.TOPK_IMPORTS.items()
        for found in [origins[name]]
    )
    missing = [name for name in spec.TOPK_IMPORTS if not origins[name]]
    torch = _alone(
        body,
        lambda s: isinstance(s, ast.Import)
        and any(a.name == "torch" and a.asname is None for a in s.names),
    )
    verdicts[imports.name] = (
        None if wrong else APPLIED if not missing else PENDING if torch else None
    )

    found = {name: defs(body, name) for name in spec.TOPK_HELPERS}
    flashinfer = set(bindings.get("has_flashinfer", []))
    expected_origin = spec.HAS_FLASHINFER.split()[1] + ".has_flashinfer"
    state = None
    if all(
        _same_or_absent(found[name], source)
        for name, source in spec.TOPK_HELPERS.items()
    ) and not flashinfer - {expected_origin}:
        present = [name for name in found if found[name]]
        if len(present) == len(spec.TOPK_HELPERS):
            state = APPLIED if flashinfer else None
        elif not present and _alone(
            body,
            lambda s: isinstance(s, ast.ImportFrom)
            and s.module == "vllm.platforms"
            and s.level == 0
            and any(a.name == "current_platform" and a.asname is None for a in s.names),
        ):
            state = PENDING
    verdicts[helpers.name] = state

    verdicts[method.name] = None
    owner = only(classes(body, spec.TOPK_CLASS))
    if isinstance(owner, ast.ClassDef):
        methods = defs(owner.body, spec.TOPK_METHOD)
        if not _same_or_absent(methods, spec.GET_TOP_K_TOKENS):
            pass
        elif methods:
            verdicts[method.name] = APPLIED
        elif (
            defs(owner.body, spec.TOPK_METHOD_ANCHOR)
            and all(defs(owner.body, n) for n in spec.TOPK_METHOD_NEEDS_MEMBERS)
            and all(n in bindings for n in spec.TOPK_METHOD_NEEDS_NAMES)
        ):
            verdicts[method.name] = PENDING
    return verdicts


def _jitted(function: ast.stmt) -> bool:
    def is_jit(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "jit"
            and isinstance(node.value, ast.Name)
            and node.value.id == "triton"
        )

    return any(
        is_jit(d) or (isinstance(d, ast.Call) and is_jit(d.func))
        for d in function.decorator_list  # type: ignore[attr-defined]
    )


def gumbel(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    (hunk,) = spec.GUMBEL.hunks
    existing = defs(tree.body, spec.GUMBEL_NAME)
    state = None
    if not _same_or_absent(existing, hunk.after):
        pass
    elif existing:
        state = APPLIED
    else:
        anchor = only(defs(tree.body, spec.GUMBEL_ANCHOR))
        bindings = module_bindings(tree.body)
        if (
            anchor is not None
            and _jitted(anchor)
            and all(n in bindings for n in spec.GUMBEL_NEEDS)
        ):
            state = PENDING
    return {hunk.name: state}


def _arms(function: ast.stmt, lines: list[bytes]) -> list[ast.If]:
    """The `if` and `elif` arms of the chains directly in the function body
    (an `if` nested in an `else:` is no arm, though Python's AST reads it as
    one)."""
    arms = []
    for statement in function.body:  # type: ignore[attr-defined]
        node = statement
        while isinstance(node, ast.If):
            arms.append(node)
            following = node.orelse
            if (
                len(following) == 1
                and isinstance(following[0], ast.If)
                and lines[following[0].lineno - 1][
                    following[0].col_offset :
                ].startswith(b"elif")
            ):
                node = following[0]
            else:
                break
    return arms


def speculator_selection(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    (hunk,) = spec.SPECULATOR_SELECTION.hunks
    verdicts: Verdicts = {hunk.name: None}
    function = only(defs(tree.body, spec.SELECTOR))
    if function is None:
        return verdicts
    arms = [
        a
        for a in _arms(function, lines)
        if dump(a.test) == expression(spec.DFLASH_TEST)
    ]
    if len(arms) != 1:
        return verdicts
    body = dump_all(arms[0].body)
    if body == statements(hunk.after):
        verdicts[hunk.name] = APPLIED
    elif body == statements(hunk.before) and not any(
        isinstance(n, ast.If) and dump(n.test) == expression(spec.DFLASH2_TEST)
        for n in ast.walk(function)
    ):
        verdicts[hunk.name] = PENDING
    return verdicts


def _method_before(owner: ast.ClassDef, source: str, anchor: str) -> State | None:
    """A method the hunk adds right before `anchor`, as `_base.method_before`
    judges it."""
    name = ast.parse(textwrap.dedent(source)).body[0].name  # type: ignore[attr-defined]
    existing = defs(owner.body, name)
    if len(existing) > 1 or not _same_or_absent(existing, source):
        return None
    if existing:
        return APPLIED
    return PENDING if len(defs(owner.body, anchor)) == 1 else None


def v2_runner_forcing(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    branch, helper = spec.V2_RUNNER_FORCING.hunks
    verdicts: Verdicts = {branch.name: None, helper.name: None}
    owner = only(classes(tree.body, spec.CONFIG_CLASS))
    if not isinstance(owner, ast.ClassDef):
        return verdicts
    verdicts[helper.name] = _method_before(
        owner, helper.after, spec.RUNNER_ANCHOR_METHOD
    )
    runner = only(defs(owner.body, spec.RUNNER))
    if runner is None:
        return verdicts
    body = runner.body  # type: ignore[attr-defined]

    def branches(source: str) -> list[int]:
        return [
            i
            for i, s in enumerate(body)
            if isinstance(s, ast.If) and not s.orelse and means(s, source)
        ]

    anchors, ours = branches(spec.ANCHOR_BRANCH), branches(spec.DFLASH2_BRANCH)
    if len(anchors) == 1:
        verdicts[branch.name] = (
            APPLIED if ours == [anchors[0] + 1] else PENDING if not ours else None
        )
    return verdicts


def draft_logit_cache(tree: ast.Module, lines: list[bytes]) -> Verdicts:
    buffer, hook = spec.DRAFT_LOGIT_CACHE.hunks
    verdicts: Verdicts = {buffer.name: None, hook.name: None}
    owner = only(classes(tree.body, spec.SPECULATOR))
    if not isinstance(owner, ast.ClassDef):
        return verdicts
    verdicts[hook.name] = _method_before(owner, hook.after, spec.HOOK_ANCHOR_METHOD)
    init = only(defs(owner.body, spec.ALLOCATING_METHOD))
    if init is None:
        return verdicts
    found = []
    for block in blocks(init):
        for index, statement in enumerate(block):
            if isinstance(statement, ast.Assign) and any(
                is_self_attribute(t, "draft_logits") for t in statement.targets
            ):
                if shares_a_line(block, index) or len(statement.targets) != 1:
                    return verdicts
                found.append((block, index))
    if len(found) != 1:
        return verdicts
    ((block, index),) = found
    allocation = block[index]
    looked_up = index > 0 and means(block[index - 1], spec.SPEC_LOOKUP)
    if looked_up and shares_a_line(block, index - 1):
        return verdicts
    if means(allocation, spec.FULL_ALLOCATION) and looked_up:
        verdicts[buffer.name] = APPLIED
    elif means(allocation, spec.ZEROS_ALLOCATION) and not looked_up:
        verdicts[buffer.name] = PENDING
    return verdicts


#: Each declared edit's quick judge, in the order of `hunks.EDITS`.
JUDGES: dict[spec.Edit, Callable[[ast.Module, list[bytes]], Verdicts]] = {
    spec.CAUSALITY: causality,
    spec.SUBCLASS_SEAMS: subclass_seams,
    spec.REGISTRY: registry,
    spec.VOCAB_PARALLEL_TOPK: vocab_parallel_topk,
    spec.GUMBEL: gumbel,
    spec.SPECULATOR_SELECTION: speculator_selection,
    spec.V2_RUNNER_FORCING: v2_runner_forcing,
    spec.DRAFT_LOGIT_CACHE: draft_logit_cache,
}


def judge_file(path: str, data: bytes) -> dict[spec.Edit, Verdicts] | None:
    """Each edit of the file with its hunks' quick verdicts; None where Python
    cannot parse the file (the codemods then say why)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    strip_docstrings(tree)
    lines = data.splitlines()
    return {edit: JUDGES[edit](tree, lines) for edit in spec.EDITS if edit.path == path}
