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
    what the new method calls: the method `_apply_head` and the module-level
    names `VocabParallelEmbedding` and `tensor_model_parallel_all_gather`.
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

from collections.abc import Sequence

import libcst as cst

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    exactly_one,
    insert_before,
    is_one_of,
    leading_blank_lines,
    pending,
    placed_before,
    removed,
    with_blank_lines,
)
from ._meaning import dotted, same_meaning
from ._names import Reads, members_named, module_bindings, named, origin_words
from .hunks import GET_TOP_K_TOKENS, HAS_FLASHINFER, VOCAB_PARALLEL_TOPK
from .hunks import TOPK_CLASS as CLASS
from .hunks import TOPK_HELPERS as HELPERS
from .hunks import TOPK_IMPORTS as IMPORTS
from .hunks import TOPK_METHOD as METHOD
from .hunks import TOPK_METHOD_ANCHOR as METHOD_ANCHOR
from .hunks import TOPK_METHOD_NEEDS_MEMBERS as METHOD_NEEDS_MEMBERS
from .hunks import TOPK_METHOD_NEEDS_NAMES as METHOD_NEEDS_NAMES

IMPORTS_HUNK, HELPERS_HUNK, METHOD_HUNK = VOCAB_PARALLEL_TOPK.hunks

# -- the spec's code ------------------------------------------------------


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and bool(stmt.body)
        and all(isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body)
    )


Body = list[cst.BaseStatement]
#: Statements to insert, by the index of the module statement they go next to.
Inserts = dict[int, list[cst.BaseStatement]]


def _sole_import(stmt: cst.CSTNode) -> cst.Import | cst.ImportFrom | None:
    """The import a line holds, when it holds one import and nothing else."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        (small,) = stmt.body
        if isinstance(small, cst.Import | cst.ImportFrom):
            return small
    return None


def _binds_plainly(names: Sequence[cst.ImportAlias], name: str) -> bool:
    return any(dotted(a.name) == name and a.asname is None for a in names)


def _imports_torch(stmt: cst.CSTNode) -> bool:
    """`import torch` (among other modules, perhaps), on a line of its own."""
    found = _sole_import(stmt)
    return isinstance(found, cst.Import) and _binds_plainly(found.names, "torch")


def _imports_platform(stmt: cst.CSTNode) -> bool:
    """`from vllm.platforms import current_platform`, on a line of its own."""
    found = _sole_import(stmt)
    return (
        isinstance(found, cst.ImportFrom)
        and not found.relative
        and dotted(found.module) == "vllm.platforms"
        and not isinstance(found.names, cst.ImportStar)
        and _binds_plainly(found.names, "current_platform")
    )


# -- undoing the edit -----------------------------------------------------


def _without_helpers(body: Body, doomed: Sequence[cst.CSTNode]) -> Body:
    """The module body less the helpers and their import, as before they came.

    The forward leaves what follows the helpers as it was, except that it
    gives it two blank lines when it had fewer. Where it now follows the
    import block again, it gets back the blank lines isort's convention puts
    there: two before a def or class (kept), one before anything else.
    """
    kept: Body = []
    after_removed = False
    for statement in body:
        if is_one_of(statement, doomed):
            after_removed = True
            continue
        if after_removed and kept and _is_import_line(kept[-1]):
            statement = _after_import_block(statement)
        after_removed = False
        kept.append(statement)
    return kept


def _after_import_block(statement: cst.BaseStatement) -> cst.BaseStatement:
    """The statement with isort's spacing after an import block, where the
    forward's two blank lines may stand for fewer: one before anything but a
    def or class."""
    if isinstance(statement, cst.FunctionDef | cst.ClassDef):
        return statement
    blank, own = leading_blank_lines(statement.leading_lines)
    if len(blank) != 2:
        return statement
    return statement.with_changes(leading_lines=[blank[0], *own])


# What reads a name the revert removes does not count when it is the edit's
# own code: it goes too, or, written another way, is drift of its own hunk.


def _helpers_of(body: Body) -> list[cst.FunctionDef]:
    """The module's top-level `_flashinfer_topk` and `_topk`."""
    return [f for name in HELPERS for f in named(body, cst.FunctionDef, name)]


def _methods_of(body: Body) -> list[cst.FunctionDef]:
    """`LogitsProcessor.get_top_k_tokens`."""
    return [
        method
        for cls in named(body, cst.ClassDef, CLASS)
        for method in members_named(cls, cst.FunctionDef, METHOD)
    ]


class VocabParallelTopK(BackportCodemod):
    SPEC = VOCAB_PARALLEL_TOPK

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        body = list(tree.body)
        bindings = module_bindings(tree.body)
        return {
            IMPORTS_HUNK.name: self._imports(body, bindings),
            HELPERS_HUNK.name: self._helpers(body, bindings),
            METHOD_HUNK.name: self._method(body, bindings),
        }

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        # Every hunk inserts next to statements of the original body, by
        # index, so that no insertion shifts another's place.
        body = list(tree.body)
        before: Inserts = {}
        after: Inserts = {}
        if IMPORTS_HUNK.name in sites:
            torch, missing = sites[IMPORTS_HUNK.name]
            lines = "".join(IMPORTS[name][1] + "\n" for name in missing)
            *new, body[torch] = placed_before(body[torch], self.statements(lines))
            before.setdefault(torch, []).extend(new)
        if HELPERS_HUNK.name in sites:
            anchor, last_import, needs_import = sites[HELPERS_HUNK.name]
            import_line, *helpers = self.statements(HELPERS_HUNK.after)
            if needs_import:
                after.setdefault(anchor, []).append(import_line)
            after.setdefault(last_import, []).extend(helpers)
            following = last_import + 1
            if following < len(body):
                # PEP 8 wants two blank lines after a top-level definition.
                body[following] = with_blank_lines(body[following], at_least=2)
        if METHOD_HUNK.name in sites:
            index, cls, anchor_method = sites[METHOD_HUNK.name]
            wrapper = self.statement("class _:\n" + GET_TOP_K_TOKENS)
            assert isinstance(wrapper, cst.ClassDef)
            (method,) = wrapper.body.body
            members = insert_before(cls.body.body, anchor_method, [method])
            body[index] = cls.with_changes(body=cls.body.with_changes(body=members))
        new_body: Body = []
        for index, statement in enumerate(body):
            new_body += before.get(index, []) + [statement] + after.get(index, [])
        return tree.with_changes(body=new_body)

    def unsafe_to_undo(
        self, tree: cst.Module, to_undo: dict[str, Judged]
    ) -> dict[str, Judged]:
        """Drift where a name the undoing removes is still read elsewhere;
        otherwise the applied hunks with what undoing them removes."""
        body = list(tree.body)
        bindings = module_bindings(tree.body)
        reads = Reads(tree)
        undone = {}
        if IMPORTS_HUNK.name in to_undo:
            undone[IMPORTS_HUNK.name] = self._unimport(body, bindings, reads)
        if HELPERS_HUNK.name in to_undo:
            helpers = to_undo[HELPERS_HUNK.name].site
            undone[HELPERS_HUNK.name] = self._unhelp(body, bindings, reads, helpers)
        return undone

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        body = list(tree.body)
        if METHOD_HUNK.name in sites:
            # The method goes, and the member after it takes back the blank
            # lines the method took from it.
            cls, methods = sites[METHOD_HUNK.name]
            members = removed(cls.body.body, methods)
            new_cls = cls.with_changes(body=cls.body.with_changes(body=members))
            body = [new_cls if s is cls else s for s in body]
        if IMPORTS_HUNK.name in sites:
            body = removed(body, sites[IMPORTS_HUNK.name])
        if HELPERS_HUNK.name in sites:
            body = _without_helpers(body, sites[HELPERS_HUNK.name])
        return tree.with_changes(body=body)

    # -- judging, hunk by hunk ------------------------------------------------

    def _imports(self, body: Body, bindings: dict[str, list[str]]) -> Judged:
        """Site: `import torch`'s index and the names to import before it."""
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
        torch = next((i for i, stmt in enumerate(body) if _imports_torch(stmt)), None)
        if torch is None:
            return drift(
                "a module-level `import torch` to put the imports before", "none"
            )
        return pending((torch, missing))

    def _unimport(
        self, body: Body, bindings: dict[str, list[str]], reads: Reads
    ) -> Judged:
        """The imports as the forward writes them, each a statement of its own
        among the imports right before `import torch`, go; `import torch`
        takes back the blank lines they took from it. Elsewhere or grouped
        with other names, an import may predate the edit (only what was
        missing is added) and stays."""
        torch = next((i for i, stmt in enumerate(body) if _imports_torch(stmt)), None)
        start = torch if torch is not None else 0
        while start > 0 and _is_import_line(body[start - 1]):
            start -= 1
        right_before_torch = body[start:torch] if torch is not None else []
        doomed: Body = []
        readers: list[str] = []
        for name, (_, line) in IMPORTS.items():
            own = [s for s in right_before_torch if same_meaning(s, line)]
            doomed += own
            if not own or len(own) < len(bindings[name]):
                continue  # nothing to remove, or still imported otherwise
            users = reads.elsewhere(name, leaving=_helpers_of(body))
            if users:
                readers.append(f"`{name}` read by {', '.join(users)}")
        if readers:
            return drift(
                "`Callable` and `cache` read by nothing but the top-k helpers, "
                "so that their imports can go with them",
                "; ".join(readers) + " (removing the import would break it)",
            )
        return applied(doomed)

    def _helpers(self, body: Body, bindings: dict[str, list[str]]) -> Judged:
        """Site: the `current_platform` import's index, the last import of its
        block, and whether `has_flashinfer` must be imported; applied, the
        helpers."""
        present: dict[str, cst.FunctionDef] = {}
        for name, source in HELPERS.items():
            existing = named(body, cst.FunctionDef, name)
            expected = f"`{name}` as the spec writes it"
            refused = self.other_version(existing, source, expected)
            if refused is not None:
                return refused
            if existing:
                present[name] = existing[0]
        fi_origins = set(bindings.get("has_flashinfer", []))
        fi_expected = HAS_FLASHINFER.split()[1] + ".has_flashinfer"
        if fi_origins - {fi_expected}:
            other = ", ".join(sorted(origin_words(o) for o in fi_origins))
            return drift(
                f"`has_flashinfer` from {HAS_FLASHINFER.split()[1]}",
                f"`has_flashinfer` bound to {other}",
            )
        if len(present) == len(HELPERS):
            if not fi_origins:
                return drift(
                    f"`{HAS_FLASHINFER}` next to the top-k helpers",
                    "the helpers without it (`_flashinfer_topk` would raise NameError)",
                )
            return applied(list(present.values()))
        if present:
            (name,) = present
            (other,) = set(HELPERS) - set(present)
            return drift(
                "both `_flashinfer_topk` and `_topk`, or neither",
                f"`{name}` without `{other}`",
            )
        anchor = next((i for i, s in enumerate(body) if _imports_platform(s)), None)
        if anchor is None:
            return drift(
                "a module-level `from vllm.platforms import current_platform` "
                "to put the top-k helpers after",
                "none",
            )
        # The helpers go after the whole import block the anchor sits in, so
        # they never split imports (the block ends at the anchor in 0.27.1).
        last_import = anchor
        while last_import + 1 < len(body) and _is_import_line(body[last_import + 1]):
            last_import += 1
        return pending((anchor, last_import, not fi_origins))

    def _unhelp(
        self,
        body: Body,
        bindings: dict[str, list[str]],
        reads: Reads,
        helpers: list[cst.FunctionDef],
    ) -> Judged:
        """Both helpers go, and the `has_flashinfer` import with them when it
        is where the forward writes it, right after the `current_platform`
        import (elsewhere, it may predate the edit)."""
        anchor = next((i for i, s in enumerate(body) if _imports_platform(s)), None)
        doomed: Body = list(helpers)
        names = list(HELPERS)
        if (
            anchor is not None
            and anchor + 1 < len(body)
            and same_meaning(body[anchor + 1], HAS_FLASHINFER)
        ):
            doomed.append(body[anchor + 1])
            if len(bindings["has_flashinfer"]) == 1:
                names.append("has_flashinfer")
        leaving = [*_helpers_of(body), *_methods_of(body)]
        readers = [
            f"`{name}` read by {', '.join(users)}"
            for name in names
            if (users := reads.elsewhere(name, leaving))
        ]
        if readers:
            return drift(
                "the top-k helpers and `has_flashinfer` read by nothing but "
                f"the helpers and `{CLASS}.{METHOD}`, so that they can go",
                "; ".join(readers) + " (removing them would break it)",
            )
        return applied(doomed)

    def _method(self, body: Body, bindings: dict[str, list[str]]) -> Judged:
        """Site: the class's index, the class and the member to insert before;
        applied, the class and the method."""
        cls = exactly_one(
            named(body, cst.ClassDef, CLASS), f"one module-level class `{CLASS}`"
        )
        if isinstance(cls, Judged):
            return cls
        methods = members_named(cls, cst.FunctionDef, METHOD)
        expected = f"`{CLASS}.{METHOD}` as the spec writes it"
        refused = self.other_version(methods, GET_TOP_K_TOKENS, expected)
        if refused is not None:
            return refused
        if methods:
            return applied((cls, methods))

        anchors = members_named(cls, cst.FunctionDef, METHOD_ANCHOR)
        problems = []
        if not anchors:
            problems.append(f"no method `{METHOD_ANCHOR}` to put it before")
        problems += [
            f"no method `{name}`, which it calls"
            for name in METHOD_NEEDS_MEMBERS
            if not members_named(cls, cst.FunctionDef, name)
        ]
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
        return pending((body.index(cls), cls, anchors[0]))
