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

import ast
import dataclasses

from ...framework.edit import Edit, Hunk, Judged, Role, Site, applied, drift, exactly_one, pending
from ...framework.hunk_files import HunkFiles, out_of_class, statements_of
from ...framework.judging import is_attribute, method_before
from ...framework.meaning import same_meaning
from ...framework.source import BLOCKS, Found, Path, Source, shares_a_line

SPECULATOR = "DraftModelSpeculator"
ALLOCATING_METHOD = "__init__"
ANCHOR_METHOD = "_validate_local_argmax_reduction"
HOOK = "draft_logits_spec"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
ZEROS_ALLOCATION = HUNKS.shipped("cached proposal distribution is speculator-shaped")
#: 0.27.1's zeros allocation becomes the hook's lookup and a full allocation.
SPEC_LOOKUP, FULL_ALLOCATION = statements_of(
    HUNKS.patched("cached proposal distribution is speculator-shaped")
)
#: The hook, out of the class its file writes it in (its docstring's later
#: lines keep the class's depth: they are string content).
HOOK_SOURCE = out_of_class(HUNKS.patched("draft_logits_spec default"))

_WHY = (
    "`draft_logits_spec` lets a speculator choose its cached distribution's "
    "dtype and fill: DFlash2 writes only K columns and needs `-inf`, not `0.0`."
)
BUFFER = HUNKS.hunk(
    "cached proposal distribution is speculator-shaped",
    f"{SPECULATOR}.{ALLOCATING_METHOD}, the one assignment of self.draft_logits",
    _WHY,
)
HOOK_METHOD = Hunk(
    "draft_logits_spec default",
    f"class {SPECULATOR}, right before {ANCHOR_METHOD}",
    None,
    HOOK_SOURCE,
    _WHY,
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Allocation(Site):
    """The allocation of self.draft_logits; applied, the lookup right
    before it too (the lookup is then `path`, the allocation `allocation`)."""

    allocation: Path | None = None


def judge(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(SPECULATOR), f"one module-level class {SPECULATOR}")
    if isinstance(cls, Judged):
        return {BUFFER.name: cls, HOOK_METHOD.name: cls}
    hook = method_before(
        cls,
        HOOK_METHOD.after,
        ANCHOR_METHOD,
        expected=f"{SPECULATOR}.{HOOK}(self, vllm_config) to return "
        "torch.float32, 0.0 (0.27.1 caches float32 draft logits)",
        remedy="make it return torch.float32, 0.0 or remove it",
    )
    return {BUFFER.name: _buffer(source, cls), HOOK_METHOD.name: hook}


def _lines_of_one(root: ast.AST) -> set[int]:
    """The statements below `root` that have their line to themselves, by id."""
    alone: set[int] = set()
    for node in ast.walk(root):
        for field in BLOCKS:
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                alone.update(id(s) for i, s in enumerate(block) if not shares_a_line(block, i))
    return alone


def _buffer(source: Source, cls: Found) -> Judged:
    """The allocation of the cached proposal, and the lookup before it."""
    where = f"{SPECULATOR}.{ALLOCATING_METHOD}"
    method = exactly_one(cls.defs(ALLOCATING_METHOD), f"one {where}")
    if isinstance(method, Judged):
        return method
    alone = _lines_of_one(method.node)
    allocation = exactly_one(
        method.walk(
            lambda s: id(s) in alone
            and isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and is_attribute(s.targets[0], "self", "draft_logits")
        ),
        f"one assignment of self.draft_logits in {where} (the "
        "probabilistic-sampling buffer)",
    )
    if isinstance(allocation, Judged):
        return allocation
    *owner_path, last = allocation.path
    siblings = source.at(tuple(owner_path)).statements(last.field)
    previous = siblings[last.index - 1] if last.index > 0 else None
    looked_up = (
        previous is not None
        and id(previous.node) in alone
        and same_meaning(previous.node, SPEC_LOOKUP)
    )
    node = allocation.node

    if same_meaning(node, FULL_ALLOCATION):
        if looked_up:
            assert previous is not None
            return applied(Allocation(path=previous.pinned(), allocation=allocation.pinned()))
        return drift(
            f"`{SPEC_LOOKUP.strip()}` right before the torch.full allocation of "
            "self.draft_logits",
            "the allocation without it",
        )
    if not same_meaning(node, ZEROS_ALLOCATION) or looked_up:
        return drift(
            "self.draft_logits allocated as torch.zeros(max_num_reqs, "
            "num_speculative_steps, vocab_size, dtype=torch.float32, "
            f"device=device) in {where}, as in vLLM 0.27.1",
            _how_allocation_differs(source, node)  # type: ignore[arg-type]
            + (f", after `{SPEC_LOOKUP.strip()}`" if looked_up else ""),
        )
    return pending(Allocation(path=allocation.pinned()))


def _how_allocation_differs(source: Source, allocation: ast.Assign) -> str:
    """The allocation, and where its arguments first depart from 0.27.1's."""
    shown = source.describe(allocation, 100)
    found = allocation.value
    spec = Source(ZEROS_ALLOCATION.strip() + "\n")
    (spec_assign,) = spec.tree.body
    assert isinstance(spec_assign, ast.Assign) and isinstance(spec_assign.value, ast.Call)
    expected = spec_assign.value
    if not isinstance(found, ast.Call) or not same_meaning(found.func, expected.func):
        return shown
    if len(found.args) != len(expected.args):
        return f"{shown}, with {len(found.args)} dimensions instead of 3"
    found_kw = {k.arg: k for k in found.keywords if k.arg}
    spec_kw = {k.arg: k for k in expected.keywords if k.arg}
    pairs: list[tuple[ast.AST | None, ast.AST]] = list(zip(found.args, expected.args))
    pairs += [(found_kw.get(name), arg) for name, arg in spec_kw.items()]
    for ours, theirs in pairs:
        if ours is None:
            return f"{shown}, without {_argument(spec, theirs)}"
        if not same_meaning(_value(ours), _value(theirs)):
            return (
                f"{shown}, with {_argument(source, ours)} where 0.27.1 has "
                f"{_argument(spec, theirs)}"
            )
    extra = [arg for name, arg in found_kw.items() if name not in spec_kw]
    if extra:
        return f"{shown}, with {_argument(source, extra[0])} added"
    return shown


def _value(argument: ast.AST) -> ast.AST:
    return argument.value if isinstance(argument, ast.keyword) else argument


def _argument(source: Source, argument: ast.AST) -> str:
    return " ".join(source.segment(argument).split())


DRAFT_LOGIT_CACHE = Edit(
    "draft-logit-cache",
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
    "the cached proposal distribution is shaped by draft_logits_spec",
    Role.SEAM,
    (BUFFER, HOOK_METHOD),
    judge,
    writer="draft_logit_cache:DraftLogitCache",
)
