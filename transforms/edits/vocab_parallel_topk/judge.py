"""Edit 4, vocab-parallel top-k: `LogitsProcessor.get_top_k_tokens`.

Target: vllm/model_executor/layers/logits_processor.py, three hunks.

imports
    Must be there: a module-level `import torch`.
    Inserts, right before it (in 0.27.1 that is right after the module
    docstring):
        from collections.abc import Callable
        from functools import cache
    Applied when both names are imported from those modules, in whatever form
    or grouping; only a missing one is added. A name bound to something else
    (`from typing import Callable`, `cache = ...`) is drift: one of the two
    bindings would shadow the other.

top-k helpers
    Must be there: a module-level `from vllm.platforms import current_platform`.
    Inserts, right after it, `from vllm.utils.flashinfer import has_flashinfer`
    and, after the import block that holds it, the helpers `_flashinfer_topk()`
    (cached: FlashInfer's radix top-k on CUDA when FlashInfer is installed,
    else None) and `_topk(scores, k)` (that kernel, or `torch.topk`).
    Applied when both helpers exist with the spec's meaning and
    `has_flashinfer` is imported; a helper of either name with another body
    is drift, and so is only one of the two, or a `has_flashinfer` imported
    from another module.

get_top_k_tokens
    Must be there: class `LogitsProcessor` with a method `extra_repr`, and
    what the new method calls: the method `_apply_head`, taking
    `(self, lm_head, hidden_states, embedding_bias)` in that order, and the
    module-level names `VocabParallelEmbedding` and
    `tensor_model_parallel_all_gather`.
    Inserts, right before `extra_repr`:
        def get_top_k_tokens(self, lm_head, hidden_states, k,
                             embedding_bias=None) -> (ids, values)
    Applied when the class has that method with the spec's meaning, wherever
    it sits among the members; one with another body is drift.

Why: the DFlash2 selector keeps the target head's top-K candidates at every
drafted position. `get_top_k_tokens` widens the existing single-token
`get_top_tokens` reduction to K, so the candidates cost O(batch * 2K *
tp_size) of communication instead of an all-gather of the whole vocabulary
per position and step. FlashInfer's radix kernel is CUDA-only, so elsewhere
this is `torch.topk`.

Everything is judged by meaning, docstrings excluded. Upstream 0.28.0 ships a
`_flashinfer_topk` that also logs, through a module `logger`, when FlashInfer
is missing: that body is not the spec's, so on 0.28.0's file the helpers hunk
is drift and the edit is refused rather than reported as done.

Reverted, the method and the helpers go, and so do the imports the forward
writes where it writes them (each on a line of its own, right before `import
torch` or right after the `current_platform` import); an import found
elsewhere or grouped with other names may predate the edit and stays. A name
that other code in the file still reads is drift: removing it would break
the module.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles, class_body, statements_of
from ...framework.judging import other_version
from ...framework.meaning import same_meaning
from ...framework.names import Readers, module_bindings, origin_words
from ...framework.source import Found, Path, Source, shares_a_line

METHOD_HUNK_NAME = "get_top_k_tokens"
HUNKS = HunkFiles(__package__)
#: Imports the helpers' annotations and decorator need: name -> (module, line).
IMPORTS = {
    statement.names[0].name: (statement.module, line)
    for line, statement in (
        (line, ast.parse(line).body[0]) for line in HUNKS.patched("imports").splitlines()
    )
    if isinstance(statement, ast.ImportFrom) and statement.module
}
#: The `has_flashinfer` import and the two helpers: hunks/top_k_helpers/.
HAS_FLASHINFER, FLASHINFER_TOPK, TOPK = statements_of(HUNKS.patched("top-k helpers"))
HAS_FLASHINFER = HAS_FLASHINFER.rstrip("\n")
HELPERS = {"_flashinfer_topk": FLASHINFER_TOPK, "_topk": TOPK}
#: The method at class-body depth, as hunks/get_top_k_tokens/ writes it in
#: its class, so that the docstring's own lines keep the spec's indentation
#: once the method sits in the class.
GET_TOP_K_TOKENS = class_body(HUNKS.patched(METHOD_HUNK_NAME))
CLASS = "LogitsProcessor"
METHOD = "get_top_k_tokens"
METHOD_ANCHOR = "extra_repr"
#: What the new method relies on besides the helpers inserted with it: the
#: methods it calls, by the parameters it passes them positionally.
METHOD_NEEDS_MEMBERS = {"_apply_head": ("self", "lm_head", "hidden_states", "embedding_bias")}
METHOD_NEEDS_NAMES = ("VocabParallelEmbedding", "tensor_model_parallel_all_gather")

_WHY = (
    "`get_top_k_tokens` gives the selector its top-K candidates with "
    "O(batch·2K·tp) communication instead of gathering the whole vocabulary."
)
IMPORTS_HUNK = Hunk(
    "imports",
    "module level, right before `import torch`",
    None,
    HUNKS.patched("imports"),
    _WHY,
)
HELPERS_HUNK = Hunk(
    "top-k helpers",
    "module level, the import right after `from vllm.platforms import "
    "current_platform`, the helpers after the import block",
    None,
    HUNKS.patched("top-k helpers"),
    _WHY,
)
METHOD_HUNK = Hunk(
    METHOD_HUNK_NAME,
    f"class {CLASS}, right before {METHOD_ANCHOR}",
    None,
    textwrap.dedent(GET_TOP_K_TOKENS),
    _WHY,
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Imports(Site):
    """`import torch`, and the names to import right before it."""

    missing: tuple[str, ...]


@dataclasses.dataclass(kw_only=True, eq=False)
class Helpers(Site):
    """The `current_platform` import, the last import of its block (the
    helpers go after it), and whether `has_flashinfer` must be imported."""

    last_import: Path
    import_has_flashinfer: bool


@dataclasses.dataclass(kw_only=True, eq=False)
class Removal(Site):
    """Module-level statements that undoing removes: `path` and `more`."""

    more: tuple[Path, ...] = ()


def _lone_import(source: Source, index: int) -> ast.Import | ast.ImportFrom | None:
    """The module-level import at `index`, when it has its line to itself."""
    statement = source.tree.body[index]
    if isinstance(statement, ast.Import | ast.ImportFrom) and not shares_a_line(
        source.tree.body, index
    ):
        return statement
    return None


def _import_line(source: Source, index: int) -> bool:
    """Whether the statement is an import and so is all else on its line."""
    body = source.tree.body
    line = body[index].lineno
    return all(
        isinstance(s, ast.Import | ast.ImportFrom)
        for s in body
        if s.lineno <= line <= s.end_lineno  # type: ignore[operator]
    )


def _plainly(names: list[ast.alias], name: str) -> bool:
    return any(a.name == name and a.asname is None for a in names)


def _torch(source: Source) -> int | None:
    """The index of `import torch` (among other modules, perhaps), alone on its line."""
    for i in range(len(source.tree.body)):
        found = _lone_import(source, i)
        if isinstance(found, ast.Import) and _plainly(found.names, "torch"):
            return i
    return None


def _platform(source: Source) -> int | None:
    """The index of `from vllm.platforms import current_platform`, alone on its line."""
    for i in range(len(source.tree.body)):
        found = _lone_import(source, i)
        if (
            isinstance(found, ast.ImportFrom)
            and found.level == 0
            and found.module == "vllm.platforms"
            and _plainly(found.names, "current_platform")
        ):
            return i
    return None


def judge(source: Source) -> dict[str, Judged]:
    bindings = module_bindings(source.tree.body)
    return {
        IMPORTS_HUNK.name: _imports(source, bindings),
        HELPERS_HUNK.name: _helpers(source, bindings),
        METHOD_HUNK.name: _method(source, bindings),
    }


def _imports(source: Source, bindings: dict[str, list[str]]) -> Judged:
    missing: list[str] = []
    conflicts: list[str] = []
    for name, (module, _) in IMPORTS.items():
        origins = set(bindings.get(name, []))
        if not origins:
            missing.append(name)
        elif origins != {f"{module}.{name}"}:
            other = ", ".join(sorted(origin_words(o) for o in origins))
            conflicts.append(f"`{name}` bound to {other}")
    if conflicts:
        return drift(
            "`Callable` from collections.abc and `cache` from functools, "
            "or neither name bound at module level",
            "; ".join(conflicts) + " (import them from those modules)",
        )
    if not missing:
        return applied()
    torch = _torch(source)
    if torch is None:
        return drift("a module-level `import torch` to put the imports before", "none")
    path = source.module.statements()[torch].pinned()
    return pending(Imports(path=path, missing=tuple(missing)))


def _helpers(source: Source, bindings: dict[str, list[str]]) -> Judged:
    present: dict[str, Found] = {}
    for name, code in HELPERS.items():
        existing = source.module.defs(name)
        refused = other_version(existing, code, f"`{name}` as the spec writes it")
        if refused is not None:
            return refused
        if existing:
            present[name] = existing[0]
    origins = set(bindings.get("has_flashinfer", []))
    expected_origin = HAS_FLASHINFER.split()[1] + ".has_flashinfer"
    if origins - {expected_origin}:
        other = ", ".join(sorted(origin_words(o) for o in origins))
        return drift(
            f"`has_flashinfer` from {HAS_FLASHINFER.split()[1]}",
            f"`has_flashinfer` bound to {other}",
        )
    if len(present) == len(HELPERS):
        if not origins:
            return drift(
                f"`{HAS_FLASHINFER}` next to the top-k helpers",
                "the helpers without it (`_flashinfer_topk` would raise NameError)",
            )
        return applied()
    if present:
        (name,) = present
        (other,) = set(HELPERS) - set(present)
        return drift("both `_flashinfer_topk` and `_topk`, or neither", f"`{name}` without `{other}`")
    anchor = _platform(source)
    if anchor is None:
        return drift(
            "a module-level `from vllm.platforms import current_platform` "
            "to put the top-k helpers after",
            "none",
        )
    # The helpers go after the whole import block the anchor sits in, so
    # they never split imports (the block ends at the anchor in 0.27.1).
    last = anchor
    while last + 1 < len(source.tree.body) and _import_line(source, last + 1):
        last += 1
    statements = source.module.statements()
    return pending(
        Helpers(
            path=statements[anchor].pinned(),
            last_import=statements[last].pinned(),
            import_has_flashinfer=not origins,
        )
    )


def _method(source: Source, bindings: dict[str, list[str]]) -> Judged:
    cls = exactly_one(source.module.classes(CLASS), f"one module-level class `{CLASS}`")
    if isinstance(cls, Judged):
        return cls
    methods = cls.defs(METHOD)
    refused = other_version(methods, GET_TOP_K_TOKENS, f"`{CLASS}.{METHOD}` as the spec writes it")
    if refused is not None:
        return refused
    if methods:
        first, *more = (m.pinned() for m in methods)
        return applied(Removal(path=first, more=tuple(more)))

    anchors = cls.defs(METHOD_ANCHOR)
    problems = []
    if not anchors:
        problems.append(f"no method `{METHOD_ANCHOR}` to put it before")
    for name, parameters in METHOD_NEEDS_MEMBERS.items():
        found = cls.defs(name)
        if not found:
            problems.append(f"no method `{name}`, which it calls")
            continue
        taken = tuple(a.arg for a in found[0].node.args.args)  # type: ignore[attr-defined]
        if len(found) > 1 or taken != parameters:
            problems.append(
                f"`{name}({', '.join(taken)})`, which it calls as "
                f"`{name}({', '.join(parameters[1:])})`"
            )
    problems += [
        f"no module-level `{name}`, which it uses"
        for name in METHOD_NEEDS_NAMES
        if name not in bindings
    ]
    if problems:
        return drift(
            f"`{CLASS}` with `{METHOD_ANCHOR}`, "
            + ", ".join(f"`{n}`" for n in METHOD_NEEDS_MEMBERS)
            + " and the module names "
            + ", ".join(f"`{n}`" for n in METHOD_NEEDS_NAMES),
            "; ".join(problems),
        )
    return pending(Site(path=anchors[0].pinned()))


# -- before undoing -----------------------------------------------------------
# What reads a name the revert removes does not count when it is the edit's
# own code: it goes too, or, written another way, is drift of its own hunk.


def _helpers_of(source: Source) -> list[ast.AST]:
    return [f.node for name in HELPERS for f in source.module.defs(name)]


def _methods_of(source: Source) -> list[ast.AST]:
    return [m.node for cls in source.module.classes(CLASS) for m in cls.defs(METHOD)]


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """Drift where a name the undoing removes is still read elsewhere;
    otherwise the applied hunks with what undoing them removes."""
    bindings = module_bindings(source.tree.body)
    readers = Readers(source)
    undone = {}
    if IMPORTS_HUNK.name in to_undo:
        undone[IMPORTS_HUNK.name] = _unimport(source, bindings, readers)
    if HELPERS_HUNK.name in to_undo:
        undone[HELPERS_HUNK.name] = _unhelp(source, bindings, readers)
    return undone


def _removal(paths: list[Path]) -> Judged:
    if not paths:
        return applied()
    first, *more = sorted(paths, key=lambda p: p[0].index)
    return applied(Removal(path=first, more=tuple(more)))


def _unimport(source: Source, bindings: dict[str, list[str]], readers: Readers) -> Judged:
    """The imports as the forward writes them, each a statement of its own
    among the imports right before `import torch`, go; `import torch` takes
    back the blank lines they took from it. Elsewhere or grouped with other
    names, an import may predate the edit (only what was missing is added)
    and stays."""
    torch = _torch(source)
    start = torch if torch is not None else 0
    while start > 0 and _import_line(source, start - 1):
        start -= 1
    statements = source.module.statements()
    right_before_torch = [
        statements[i]
        for i in range(start, torch if torch is not None else 0)
        if _lone_import(source, i) is not None
    ]
    doomed: list[Path] = []
    reads: list[str] = []
    for name, (_, line) in IMPORTS.items():
        own = [s for s in right_before_torch if same_meaning(s.node, line)]
        doomed += [s.pinned() for s in own]
        if not own or len(own) < len(bindings[name]):
            continue  # nothing to remove, or still imported otherwise
        users = readers.of(name, leaving=_helpers_of(source))
        if users:
            reads.append(f"`{name}` read by {', '.join(users)}")
    if reads:
        return drift(
            "`Callable` and `cache` read by nothing but the top-k helpers, "
            "so that their imports can go with them",
            "; ".join(reads) + " (removing the import would break it)",
        )
    return _removal(doomed)


def _unhelp(source: Source, bindings: dict[str, list[str]], readers: Readers) -> Judged:
    """Both helpers go, and the `has_flashinfer` import with them when it
    is where the forward writes it, right after the `current_platform`
    import (elsewhere, it may predate the edit)."""
    anchor = _platform(source)
    statements = source.module.statements()
    doomed = [f.pinned() for name in HELPERS for f in source.module.defs(name)]
    names = list(HELPERS)
    if (
        anchor is not None
        and anchor + 1 < len(statements)
        and _lone_import(source, anchor + 1) is not None
        and same_meaning(statements[anchor + 1].node, HAS_FLASHINFER)
    ):
        doomed.append(statements[anchor + 1].pinned())
        if len(bindings["has_flashinfer"]) == 1:
            names.append("has_flashinfer")
    leaving = [*_helpers_of(source), *_methods_of(source)]
    reads = [
        f"`{name}` read by {', '.join(users)}"
        for name in names
        if (users := readers.of(name, leaving))
    ]
    if reads:
        return drift(
            "the top-k helpers and `has_flashinfer` read by nothing but "
            f"the helpers and `{CLASS}.{METHOD}`, so that they can go",
            "; ".join(reads) + " (removing them would break it)",
        )
    return _removal(doomed)


VOCAB_PARALLEL_TOPK = Edit(
    "vocab-parallel-topk",
    "vllm/model_executor/layers/logits_processor.py",
    "LogitsProcessor.get_top_k_tokens: vocab-parallel top-k without an "
    "all-gather of the full logits",
    Role.SEAM,
    (IMPORTS_HUNK, HELPERS_HUNK, METHOD_HUNK),
    judge,
    writer="vocab_parallel_topk:VocabParallelTopK",
    before_undo=before_undo,
)

assert "".join(line + "\n" for _, line in IMPORTS.values()) == IMPORTS_HUNK.after
assert f"{HAS_FLASHINFER}\n\n\n{FLASHINFER_TOPK}\n\n{TOPK}" == HELPERS_HUNK.after
