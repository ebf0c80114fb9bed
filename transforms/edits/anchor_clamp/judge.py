"""Fix: a DFlash2 draft's anchor token is clamped into the draft's vocabulary.

Target: vllm/model_executor/models/qwen3_dflash.py, one hunk.

dflash_anchors_in_vocab
    Must be there: a module-level `def _get_dflash_fc_input_size`, and the
    module-level name `torch` (the new function's annotations read it). In
    vLLM 0.26.0, which computes that width inline in
    `DFlashQwen3Model.__init__` (0.27.0 moved it into the function), the
    function that follows it in 0.27.x, `def _resolve_layer_attention`,
    stands in for it. Inserts, right before it:
        def dflash_anchors_in_vocab(anchor_token_ids, vocab_size) -> torch.Tensor
    which returns `anchor_token_ids.clamp(0, vocab_size - 1)`. Applied when a
    module-level function of that name means what the fix's does (docstring
    excluded); one with another body is drift, never "done".

Why: a request still in chunked prefill anchors its draft block on its next
prompt token, which can lie past the draft's vocabulary (a multimodal
placeholder). The DFlash2 candidate selector looks the anchor up in its
predecessor codebook, one row per vocabulary entry, so such a token indexes
out of range: an IndexError on the CPU, a device-side fault on a GPU, the
engine down. vLLM 0.34.0 clamps the anchor in its DFlash2 model
(`_score_edges_reference`, and the same bound in its Triton kernel); that
request's draft is discarded, so the clamped id never decides a token.

Where: upstream's clamp stands in the DFlash2 model, a module this tool
installs, and the installed modules are the same bytes whichever edit set a
tree holds. So the clamp itself is this function, in the DFlash1 model
module that the DFlash2 model builds on (where the DFlash2 PR's own seams
stand), and the DFlash2 model (modules/qwen3_dflash2.py) calls it where the
tree has it: with `apply` every anchor is clamped as in 0.34.0, with
`apply --only-pr` the function is not there and the model indexes as
0.28.0's does. DFlash1 does not call it: its draft embeds the anchor with
the target's own embedding.

Reverted, the function goes and what followed it takes back the blank lines
it took; if other code in the file calls it, that is drift: removing it
would break the module.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Judged, Role, Site, applied, drift, pending
from ...framework.hunk_files import HunkFiles
from ..gumbel.judge import Functions
from ...framework.judging import kept_while_used, other_version
from ...framework.names import Readers, module_bindings
from ...framework.source import Source

PATH = "vllm/model_executor/models/qwen3_dflash.py"
NAME = "dflash_anchors_in_vocab"
ANCHOR = "_get_dflash_fc_input_size"
#: vLLM 0.26.0's form: no `ANCHOR`, the model's __init__ assigns the width
#: itself, and the function after `ANCHOR`'s place in 0.27.x is the anchor.
#: The assignment is asked for, so that a fork that renamed `ANCHOR` is
#: drift, not patched at another place.
INLINE_ANCHOR = "_resolve_layer_attention"
INLINE_MODEL, INLINE_WIDTH = "DFlashQwen3Model", "fc_input_size"
#: Module-level names the new function reads.
NEEDS = ("torch",)
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
FUNCTION = HUNKS.patched("anchor clamp")

HUNK = HUNKS.hunk(
    "anchor clamp",
    f"module level, right before `def {ANCHOR}` (in vLLM 0.26.0, which computes that "
    f"width inline, before `def {INLINE_ANCHOR}`)",
    "A DFlash2 draft's anchor (a chunked prefill's next prompt token, which "
    "can lie past the draft's vocabulary) is clamped before the candidate "
    "selector looks it up, as in vLLM 0.34.0: out of range, it crashes the "
    "engine.",
)


def judge(source: Source) -> dict[str, Judged]:
    existing = source.module.defs(NAME)
    refused = other_version(existing, HUNK.after, f"`{NAME}` as the fix writes it")
    if refused is not None:
        return {HUNK.name: refused}
    if existing:
        first, *more = (f.pinned() for f in existing)
        return {HUNK.name: applied(Functions(path=first, more=tuple(more)))}
    return {HUNK.name: placed_before_anchor(source, f"`{NAME}`")}


def placed_before_anchor(source: Source, what: str) -> Judged:
    """Pending right before `ANCHOR` (`INLINE_ANCHOR` in 0.26.0's form), or
    drift naming what is missing: the anchor, or the module-level `torch`
    the inserted code reads. `what` names that code in the message."""
    anchor, anchors = ANCHOR, source.module.defs(ANCHOR)
    if not anchors and _width_inline(source):
        anchor, anchors = INLINE_ANCHOR, source.module.defs(INLINE_ANCHOR)
    problems = []
    if len(anchors) != 1:
        problems.append(
            f"{len(anchors)} module-level `{anchor}` definitions" if anchors
            else f"no module-level `{anchor}` (renamed or removed?) to put {what} before"
        )
    bindings = module_bindings(source.tree.body)
    missing = [name for name in NEEDS if name not in bindings]
    if missing:
        problems.append(
            ", ".join(f"`{name}`" for name in missing)
            + f" not imported at module level, though {what} reads it"
        )
    if problems:
        return drift(
            f"one module-level `def {anchor}` to insert before, and `torch` "
            "imported at module level",
            "; ".join(problems),
        )
    return pending(Site(path=anchors[0].pinned()))


def _width_inline(source: Source) -> bool:
    """Whether `INLINE_MODEL.__init__` assigns `INLINE_WIDTH` (0.26.0)."""

    def assigns_width(statement: ast.stmt) -> bool:
        return isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == INLINE_WIDTH
            for target in statement.targets
        )

    return any(
        init.walk(assigns_width)
        for model in source.module.classes(INLINE_MODEL)
        for init in model.defs("__init__")
    )


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """Other module code that calls the function would break without it."""
    leaving = [f.node for f in source.module.defs(NAME)]
    callers = Readers(source).of(NAME, leaving)
    return kept_while_used(HUNK, NAME, callers, verb="called")


ANCHOR_CLAMP = Edit(
    "anchor-clamp",
    PATH,
    "dflash_anchors_in_vocab: the DFlash2 model clamps a draft's anchor "
    "token into its vocabulary, as in vLLM 0.34.0",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="anchor_clamp:AnchorClamp",
    before_undo=before_undo,
    fix=Fix("", "0.34.0"),
)
