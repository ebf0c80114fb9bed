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

import dataclasses

import libcst as cst

from ._base import (
    BackportCodemod,
    Judged,
    applied,
    drift,
    edited_class,
    exactly_one,
    pending,
    with_block,
)
from ._meaning import code_of, describe, find_all, is_attribute, same_meaning
from ._names import members_named, named
from .hunks import (
    ALLOCATING_METHOD,
    DRAFT_LOGIT_CACHE,
    FULL_ALLOCATION,
    HOOK,
    SPEC_LOOKUP,
    SPECULATOR,
)
from .hunks import HOOK_ANCHOR_METHOD as ANCHOR_METHOD

BUFFER, HOOK_METHOD = DRAFT_LOGIT_CACHE.hunks
ZEROS_ALLOCATION = BUFFER.before


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
    SPEC = DRAFT_LOGIT_CACHE

    def judge(self, tree: cst.Module) -> dict[str, Judged]:
        cls = exactly_one(
            named(tree.body, cst.ClassDef, SPECULATOR),
            f"one module-level class {SPECULATOR}",
        )
        if isinstance(cls, Judged):
            return {BUFFER.name: cls, HOOK_METHOD.name: cls}
        hook = self.method_before(
            cls,
            HOOK_METHOD.after,
            ANCHOR_METHOD,
            expected=f"{SPECULATOR}.{HOOK}(self, vllm_config) to return "
            "torch.float32, 0.0 (0.27.1 caches float32 draft logits)",
            remedy="make it return torch.float32, 0.0 or remove it",
        )
        # Each site carries the class: both hunks rewrite it, in one go.
        return {
            BUFFER.name: self._buffer(cls),
            HOOK_METHOD.name: dataclasses.replace(hook, site=(cls, hook.site)),
        }

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        cls = swap = insert = None
        if BUFFER.name in sites:
            cls, method, block, index = sites[BUFFER.name]
            statements = list(block.body)
            allocation = statements[index]
            lookup, full = self.statements(SPEC_LOOKUP + FULL_ALLOCATION)
            assert isinstance(full, cst.SimpleStatementLine)
            # Comments above the allocation now introduce the pair; one at the
            # end of its line stays at the end of the allocation.
            statements[index : index + 1] = [
                lookup.with_changes(leading_lines=allocation.leading_lines),
                full.with_changes(trailing_whitespace=allocation.trailing_whitespace),
            ]
            swap = method, with_block(method, block, statements)
        if HOOK_METHOD.name in sites:
            cls, insert = sites[HOOK_METHOD.name]
        assert cls is not None
        return edited_class(tree, cls, swap=swap, insert=insert)

    def backward(self, tree: cst.Module, sites: dict) -> cst.Module:
        cls = swap = method_added = None
        if BUFFER.name in sites:
            cls, method, block, index = sites[BUFFER.name]
            statements = list(block.body)
            lookup, allocation = statements[index - 1 : index + 1]
            (zeros,) = self.statements(ZEROS_ALLOCATION)
            # The forward split, undone: comments above the pair or between
            # its lines introduce the allocation again; one at the end of the
            # allocation stays there, one at the end of the lookup goes with it.
            statements[index - 1 : index + 1] = [
                zeros.with_changes(
                    leading_lines=[*lookup.leading_lines, *allocation.leading_lines],
                    trailing_whitespace=allocation.trailing_whitespace,
                )
            ]
            swap = method, with_block(method, block, statements)
        if HOOK_METHOD.name in sites:
            cls, method_added = sites[HOOK_METHOD.name]
        assert cls is not None
        return edited_class(tree, cls, swap=swap, remove=method_added)

    def _buffer(self, cls: cst.ClassDef) -> Judged:
        """The allocation of the cached proposal; the site is the class,
        `__init__`, the block that allocates and the allocation's index."""
        where = f"{SPECULATOR}.{ALLOCATING_METHOD}"
        method = exactly_one(
            members_named(cls, cst.FunctionDef, ALLOCATING_METHOD), f"one {where}"
        )
        if isinstance(method, Judged):
            return method
        allocation = exactly_one(
            find_all(method, _assigns_draft_logits),
            f"one assignment of self.draft_logits in {where} (the "
            "probabilistic-sampling buffer)",
        )
        if isinstance(allocation, Judged):
            return allocation
        assert isinstance(allocation, cst.SimpleStatementLine)
        block = self._block_of(method, allocation)
        statements = list(block.body)
        index = next(i for i, s in enumerate(statements) if s is allocation)
        looked_up = index > 0 and same_meaning(statements[index - 1], SPEC_LOOKUP)
        site = (cls, method, block, index)

        if same_meaning(allocation, FULL_ALLOCATION):
            if looked_up:
                return applied(site)
            return drift(
                f"`{SPEC_LOOKUP.strip()}` right before the torch.full "
                "allocation of self.draft_logits",
                "the allocation without it",
            )
        if not same_meaning(allocation, ZEROS_ALLOCATION) or looked_up:
            return drift(
                "self.draft_logits allocated as torch.zeros(max_num_reqs, "
                "num_speculative_steps, vocab_size, dtype=torch.float32, "
                f"device=device) in {where}, as in vLLM 0.27.1",
                _how_allocation_differs(allocation)
                + (f", after `{SPEC_LOOKUP.strip()}`" if looked_up else ""),
            )
        return pending(site)

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
