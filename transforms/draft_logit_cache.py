"""Edit 7, draft logit cache: a speculator says how its cached proposal is shaped.

Target: class `DraftModelSpeculator` in
vllm/v1/worker/gpu/spec_decode/speculator.py.

In its `__init__`, the allocation of the cached proposal distribution must be
0.27.1's

    self.draft_logits = torch.zeros(
        self.max_num_reqs, self.num_speculative_steps, self.vocab_size,
        dtype=torch.float32, device=device,
    )

and becomes

    dtype, fill = self.draft_logits_spec(vllm_config)
    self.draft_logits = torch.full(
        (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),
        fill, dtype=dtype, device=device,
    )

Right before the method `_validate_local_argmax_reduction` it inserts the
default hook `draft_logits_spec(self, vllm_config) -> tuple[torch.dtype,
float]`, which returns `torch.float32, 0.0`.

Why: DFlash2 writes only its K candidate columns per row, so it needs a buffer
filled with -inf; an unwritten column left at 0.0 would be a uniform-weight
candidate the rejection sampler treats as real. The default keeps 0.27.1's
float32 zeros, so every other speculator allocates exactly what it does today.
Upstream's hook returns `model_config.head_dtype` instead; 0.27.1 does not
cache the proposal in that dtype, so a `draft_logits_spec` that returns it is
drift, as is any other existing `draft_logits_spec` that differs from the
default.

Reverted, the lookup and the `torch.full` allocation become 0.27.1's
`torch.zeros` allocation again, in the layout above, and the hook leaves the
class, the member after it taking back the blank lines that set it apart.
"""

from __future__ import annotations

import libcst as cst

from ._base import BackportCodemod, edited_class, with_block
from ._meaning import code_of, describe, same_meaning, find_all, is_attribute
from ._names import members_named
from .hunks import (
    ALLOCATING_METHOD,
    DRAFT_LOGIT_CACHE,
    FULL_ALLOCATION,
    HOOK,
    HOOK_SOURCE,
    SPEC_LOOKUP,
    SPECULATOR,
    ZEROS_ALLOCATION,
)
from .hunks import (
    HOOK_ANCHOR_METHOD as ANCHOR_METHOD,
)


def _assigns_draft_logits(node: cst.CSTNode) -> bool:
    """A line that is `self.draft_logits = ...` and nothing else."""
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return False
    (small,) = node.body
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and is_attribute(small.targets[0].target, "self", "draft_logits")
    )


class DraftLogitCache(BackportCodemod):
    EDIT, PATH, DESCRIPTION = (
        DRAFT_LOGIT_CACHE.name,
        DRAFT_LOGIT_CACHE.path,
        DRAFT_LOGIT_CACHE.description,
    )

    BUFFER_HUNK, HOOK_HUNK = (h.name for h in DRAFT_LOGIT_CACHE.hunks)

    def backport(self, tree: cst.Module) -> cst.Module:
        cls = self.only_class(tree, SPECULATOR, (self.BUFFER_HUNK, self.HOOK_HUNK))
        if cls is None:
            return tree
        # Both hunks are judged before anything changes, so that every drift
        # is reported and a drift in one leaves the other unwritten.
        buffer = self._buffer(cls)
        hook = self.method_before(
            self.HOOK_HUNK,
            cls,
            HOOK_SOURCE,
            ANCHOR_METHOD,
            expected=f"{SPECULATOR}.{HOOK}(self, vllm_config) to return "
            "torch.float32, 0.0 (0.27.1 caches float32 draft logits)",
            remedy="make it return torch.float32, 0.0 or remove it",
        )
        if self.drifted():
            return tree
        if self.revert:
            added = self.applied_method(self.HOOK_HUNK, cls, HOOK)
            return edited_class(tree, cls, swap=buffer, remove=added)
        return edited_class(tree, cls, swap=buffer, insert=hook)

    def _buffer(
        self, cls: cst.ClassDef
    ) -> tuple[cst.FunctionDef, cst.FunctionDef] | None:
        """The `__init__` to swap in, if the allocation is pending (or,
        reverting, applied)."""
        hunk = self.BUFFER_HUNK
        where = f"{SPECULATOR}.{ALLOCATING_METHOD}"
        methods = members_named(cls, cst.FunctionDef, ALLOCATING_METHOD)
        if len(methods) != 1:
            self.drift(hunk, f"one {where}", f"{len(methods)}")
            return None
        (method,) = methods
        assignments = find_all(method, _assigns_draft_logits)
        if len(assignments) != 1:
            self.drift(
                hunk,
                f"one assignment of self.draft_logits in {where} (the "
                "probabilistic-sampling buffer)",
                f"{len(assignments)}",
            )
            return None
        (allocation,) = assignments
        assert isinstance(allocation, cst.SimpleStatementLine)
        block = self._block_of(method, allocation)
        statements = list(block.body)
        index = next(i for i, s in enumerate(statements) if s is allocation)
        looked_up = index > 0 and same_meaning(statements[index - 1], SPEC_LOOKUP)

        if same_meaning(allocation, FULL_ALLOCATION):
            if looked_up:
                self.applied(hunk)
                if self.revert:
                    lookup = statements[index - 1]
                    (zeros,) = self.statements(ZEROS_ALLOCATION)
                    # The split below, undone: comments above the pair or
                    # between its lines introduce the allocation again; one at
                    # the end of the allocation stays there, one at the end of
                    # the lookup goes with it.
                    statements[index - 1 : index + 1] = [
                        zeros.with_changes(
                            leading_lines=[
                                *lookup.leading_lines,
                                *allocation.leading_lines,
                            ],
                            trailing_whitespace=allocation.trailing_whitespace,
                        )
                    ]
                    return method, with_block(method, block, statements)
            else:
                self.drift(
                    hunk,
                    f"`{SPEC_LOOKUP.strip()}` right before the torch.full "
                    "allocation of self.draft_logits",
                    "the allocation without it",
                )
            return None
        if not same_meaning(allocation, ZEROS_ALLOCATION) or looked_up:
            self.drift(
                hunk,
                "self.draft_logits allocated as torch.zeros(max_num_reqs, "
                "num_speculative_steps, vocab_size, dtype=torch.float32, "
                f"device=device) in {where}, as in vLLM 0.27.1",
                _how_allocation_differs(allocation)
                + (f", after `{SPEC_LOOKUP.strip()}`" if looked_up else ""),
            )
            return None

        self.pending(hunk)
        if self.revert:
            return None
        lookup, full = self.statements(SPEC_LOOKUP + FULL_ALLOCATION)
        assert isinstance(full, cst.SimpleStatementLine)
        # Comments above the allocation now introduce the pair; one at the end
        # of its line stays at the end of the allocation.
        statements[index : index + 1] = [
            lookup.with_changes(leading_lines=allocation.leading_lines),
            full.with_changes(trailing_whitespace=allocation.trailing_whitespace),
        ]
        return method, with_block(method, block, statements)

    @staticmethod
    def _block_of(
        method: cst.FunctionDef, statement: cst.BaseStatement
    ) -> cst.IndentedBlock:
        blocks = find_all(
            method,
            lambda n: isinstance(n, cst.IndentedBlock)
            and any(s is statement for s in n.body),
        )
        (block,) = blocks
        assert isinstance(block, cst.IndentedBlock)
        return block


def _how_allocation_differs(allocation: cst.SimpleStatementLine) -> str:
    """The allocation, and where its arguments first depart from 0.27.1's."""
    (assign,) = allocation.body
    assert isinstance(assign, cst.Assign)
    shown = describe(assign, 100)
    found = assign.value
    spec_line = cst.parse_statement(ZEROS_ALLOCATION.strip())
    assert isinstance(spec_line, cst.SimpleStatementLine)
    spec_assign = spec_line.body[0]
    assert isinstance(spec_assign, cst.Assign)
    spec = spec_assign.value
    assert isinstance(spec, cst.Call)
    if not isinstance(found, cst.Call) or not same_meaning(found.func, spec.func):
        return shown
    found_dims = [a for a in found.args if a.keyword is None]
    spec_dims = [a for a in spec.args if a.keyword is None]
    if len(found_dims) != len(spec_dims):
        return f"{shown}, with {len(found_dims)} dimensions instead of 3"
    found_kw = {a.keyword.value: a for a in found.args if a.keyword is not None}
    spec_kw = {a.keyword.value: a for a in spec.args if a.keyword is not None}
    pairs = [*zip(found_dims, spec_dims)]
    pairs += [(found_kw.get(name), arg) for name, arg in spec_kw.items()]
    for ours, theirs in pairs:
        if ours is None:
            return f"{shown}, without {_argument(theirs)}"
        if not same_meaning(ours.value, theirs.value):
            return (
                f"{shown}, with {_argument(ours)} where 0.27.1 has {_argument(theirs)}"
            )
    extra = [arg for name, arg in found_kw.items() if name not in spec_kw]
    if extra:
        return f"{shown}, with {_argument(extra[0])} added"
    return shown


def _argument(arg: cst.Arg) -> str:
    return " ".join(code_of(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).split())
