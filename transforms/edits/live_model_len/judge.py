"""Fix: the DFlash speculators read the model length live, as in vLLM 0.33.0.

Target: class `DraftModelSpeculator` in
vllm/v1/worker/gpu/spec_decode/speculator.py, two hunks.

length read live
    In `__init__`, the assignment `self.max_model_len =
    vllm_config.model_config.max_model_len`, between the assignments of
    `self.max_num_tokens` and `self.draft_max_seq_len`, goes. The latter
    still starts from the length, now read through the property.
length property
    A read-only property `max_model_len`, right before `load_draft_model`,
    that returns `self.vllm_config.model_config.max_model_len`.

It must be all that sets `max_model_len` in the module: any other setting,
which the read-only property would turn into an AttributeError, is drift.

Why: with `max_model_len` left to auto-fit, vLLM builds the runner and its
speculator with the model's full length, then fits the length to the KV
cache: the engine core tells every worker (`update_max_model_len`), which
sets the model config's and the runner's, and the runner sizes its block
tables to the fitted length. The speculator kept the length it was built
with, and that is the bound DFlash, DSpark and DFlash2 clamp their query
positions and draft sequence lengths to: a request that ends near the
fitted length drafts at positions past it, beyond the block tables. Every
speculator of 0.27.1 reads the length through `self.max_model_len`, so the
property serves them all.

0.33.0 also bounds `max_seq_len` by the live length where
`_build_draft_attn_metadata` builds the draft's attention metadata; every
speculator of 0.27.1 sets `draft_max_seq_len` from the live length before
each proposal, so that is not carried.

Reverted, the property goes, the member after it taking back its blank
lines, and the assignment is 0.27.1's again.
"""

from __future__ import annotations

from ...framework.edit import Edit, Fix, Hunk, Judged, Role, drift, exactly_one
from ...framework.hunk_files import HunkFiles, out_of_class
from ...framework.in_place import judge_run
from ...framework.judging import method_before
from ...framework.names import setters_besides
from ...framework.source import Found, Source
from ...framework.vocabulary import State

SPECULATOR = "DraftModelSpeculator"
ATTRIBUTE = "max_model_len"
ANCHOR = "load_draft_model"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)

_WHY = (
    "The speculator reads max_model_len live, as in vLLM 0.33.0: auto-fit "
    "lowers it after the speculator is built, and the DFlash speculators "
    "clamp draft positions to it."
)
READ_LIVE = HUNKS.hunk(
    "length read live",
    f"{SPECULATOR}.__init__, the assignment of self.{ATTRIBUTE}",
    _WHY,
)
PROPERTY = Hunk(
    "length property",
    f"class {SPECULATOR}, right before {ANCHOR}",
    None,
    out_of_class(HUNKS.patched("length property")),
    _WHY,
)


def judge(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(SPECULATOR), f"one module-level class {SPECULATOR}")
    if isinstance(cls, Judged):
        return {READ_LIVE.name: cls, PROPERTY.name: cls}
    prop = method_before(
        cls,
        PROPERTY.after,
        ANCHOR,
        expected=f"{SPECULATOR}.{ATTRIBUTE} as a read-only property returning "
        "self.vllm_config.model_config.max_model_len",
        remedy="make it that or remove it",
    )
    return {READ_LIVE.name: _assignment(source, cls), PROPERTY.name: prop}


def _assignment(source: Source, cls: Found) -> Judged:
    init = exactly_one(cls.defs("__init__"), f"one method {SPECULATOR}.__init__")
    if isinstance(init, Judged):
        return init
    judged = judge_run(
        source,
        init,
        READ_LIVE,
        f"the assignments of self.max_num_tokens, self.{ATTRIBUTE} and "
        f"self.draft_max_seq_len in {SPECULATOR}.__init__",
    )
    if judged.state is State.DRIFT:
        return judged
    # 0.27.1's assignment is the one setter the fix takes out; any other,
    # before or after it, would set a read-only property.
    owned = judged.site.paths() if judged.state is State.PENDING and judged.site else []
    others = setters_besides(source, ATTRIBUTE, owned)
    if not others:
        return judged
    other = others[0]
    return drift(
        f"no code in the module that sets `{ATTRIBUTE}` but 0.27.1's assignment "
        f"in {SPECULATOR}.__init__",
        f"{source.describe(other)} on line {other.lineno}, which the read-only "
        f"property would refuse; take it out, or set vllm_config.model_config.{ATTRIBUTE}",
    )


LIVE_MODEL_LEN = Edit(
    "live-model-len",
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
    "the speculators read max_model_len live, so that auto-fit's lower "
    "length bounds the draft, as in vLLM 0.33.0",
    Role.SEAM,
    (READ_LIVE, PROPERTY),
    judge,
    writer="live_model_len:LiveModelLen",
    fix=Fix("", "0.33.0"),
)
