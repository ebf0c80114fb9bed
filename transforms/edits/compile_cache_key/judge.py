"""Fix: a DFlash2 draft's compiled graph is keyed by its number of
speculative tokens (not yet fixed upstream: vLLM 0.34.0 still lists
`num_speculative_tokens` among the factors its compile key ignores, and no
upstream source names a PR, so none is cited).

Target: vllm/config/speculative.py, `SpeculativeConfig.compute_hash`, one
hunk. Right before its `hash_str = safe_hash(str(factors).encode(), ...)`
it inserts

    if (
        self.method == "dflash"
        and self.draft_model_config is not None
        and "DFlash2DraftModel" in (self.draft_model_config.architectures or [])
    ):
        factors.append(self.num_speculative_tokens)

Why: the DFlash2 draft's convolutions bake `block_size = k + 1` into the
compiled graph, and `VllmConfig.compute_hash()`, which keys torch.compile's
cache (the AOT one included, on by default from torch 2.10), leaves `k` out,
so an engine started with k=7 after one with k=3 reuses the graph built for
blocks of 4. Only DFlash2 drafts get the factor: DFlash1's model does not
depend on `k`, and its key, like every other method's, stays 0.27.1's, so
applying the backport recompiles nothing else.

Reverted, the `if` goes with the comment above it.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles, statements_of
from ...framework.judging import statement_beside
from ...framework.meaning import parsed, same_meaning
from ...framework.source import Source
from ...framework.vocabulary import State

CLASS = "SpeculativeConfig"
METHOD = "compute_hash"
ANCHOR = "hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()"
K_FACTOR = "factors.append(self.num_speculative_tokens)"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
FACTOR_SOURCE = HUNKS.patched("speculative tokens factor")
#: The factor's statement, without the comment above it.
(FACTOR,) = statements_of(FACTOR_SOURCE, comments=False)

HUNK = HUNKS.hunk(
    "speculative tokens factor",
    f"{CLASS}.{METHOD}, right before `{ANCHOR}`",
    "A DFlash2 draft's compiled graph bakes in `num_speculative_tokens + 1`; "
    "without `k` in the compile-cache key, k=7 would reuse the graph compiled "
    "for k=3.",
)


def judge(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(CLASS), f"one module-level class {CLASS}")
    if isinstance(cls, Judged):
        return {HUNK.name: cls}
    method = exactly_one(cls.defs(METHOD), f"one method {CLASS}.{METHOD}")
    if isinstance(method, Judged):
        return {HUNK.name: method}
    not_a_list = _factors_not_a_list(source, method.node)  # type: ignore[arg-type]
    if not_a_list is not None:
        return {HUNK.name: not_a_list}
    judged = statement_beside(
        method,
        lambda s: isinstance(s, ast.Assign) and same_meaning(s, ANCHOR),
        f"`{ANCHOR}`",
        FACTOR,
        after=False,
    )
    # A factor of k added some other way is someone else's fix: adding ours
    # beside it would hash k twice, and undoing it is not ours to do.
    factors = method.walk(lambda s: same_meaning([s], parsed(K_FACTOR)))
    ours = 1 if judged.state is State.APPLIED else 0
    if judged.state is not State.DRIFT and len(factors) > ours:
        return {
            HUNK.name: drift(
                "no factor of num_speculative_tokens in compute_hash but the "
                "backport's DFlash2 one",
                f"{source.describe(factors[0].node)} added otherwise",
            )
        }
    return {HUNK.name: judged}


def _factors_not_a_list(source: Source, method: ast.FunctionDef) -> Judged | None:
    """The factor is appended: `factors` must be bound once, to a list."""
    bindings = [
        node for node in ast.walk(method)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        and any(isinstance(t, ast.Name) and t.id == "factors"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    ]
    if len(bindings) == 1 and isinstance(bindings[0], ast.Assign | ast.AnnAssign) \
            and isinstance(bindings[0].value, ast.List):
        return None
    found = (", ".join(source.describe(b) for b in bindings[:2])
             if bindings else "no binding of it")
    return drift(
        f"`factors` bound once in {CLASS}.{METHOD}, to a list the factor is "
        "appended to (`factors: list[Any] = []`), as in vLLM 0.27.1",
        found,
    )


COMPILE_CACHE_KEY = Edit(
    "compile-cache-key",
    "vllm/config/speculative.py",
    "SpeculativeConfig.compute_hash counts num_speculative_tokens for a "
    "DFlash2 draft",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="compile_cache_key:CompileCacheKey",
    fix=Fix("#53366", "unreleased"),
)
