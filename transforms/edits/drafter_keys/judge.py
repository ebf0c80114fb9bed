"""Fix: a DFlash draft's `use_aux_hidden_state` and `mask_token_id` are read
at the top level of its config too, as in vLLM 0.29.0.

Target: `DFlashQwen3Model.__init__` in
vllm/model_executor/models/qwen3_dflash.py, two hunks, each a statement
0.27.1 has there, rewritten in place.

aux hidden state read at the top level
    0.27.1's `if "use_aux_hidden_state" in drafter_config: ... else: True`
    becomes `drafter_config.get("use_aux_hidden_state",
    getattr(self.config, "use_aux_hidden_state", True))`.
mask token read at the top level
    `drafter_config.get("mask_token_id")` becomes
    `drafter_config.get("mask_token_id", getattr(self.config,
    "mask_token_id", None))`.

The draft's `dflash_config` (merged over its `eagle_config`) still comes
first; the top level is read only where neither gives the key.

Why: 0.27.1 reads both keys only inside `dflash_config`. A checkpoint that
sets `use_aux_hidden_state: false` at the top level gets a model that
still projects the target's hidden states through `fc`, whose weights the
checkpoint does not have and nothing reports missing: the drafts come from
uninitialised memory. One that gives `mask_token_id` only at the top level
gets the right mask token from the speculator (0.27.1's speculator already
falls back to the top level) but a model whose `mask_token_id` is None, so
a mask embedding the checkpoint ships (`mask_embedding.pt`) is never
loaded. DFlash1 and DFlash2 drafts share the model, so both are fixed, as
in 0.29.0.

Reverted, each statement is 0.27.1's again.
"""

from __future__ import annotations

from ...framework.edit import Edit, Fix, Judged, Role, exactly_one
from ...framework.hunk_files import HunkFiles
from ...framework.in_place import judge_run
from ...framework.source import Source

MODEL = "DFlashQwen3Model"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)

AUX = HUNKS.hunk(
    "aux hidden state read at the top level",
    f"{MODEL}.__init__, the setting of self.use_aux_hidden_state",
    "A draft's use_aux_hidden_state given at the top level of its config is "
    "read, as in vLLM 0.29.0: ignored, a draft without fc weights projects "
    "through uninitialised ones.",
)
MASK = HUNKS.hunk(
    "mask token read at the top level",
    f"{MODEL}.__init__, the setting of self.mask_token_id",
    "A draft's mask_token_id given at the top level of its config is read by "
    "the model too, as in vLLM 0.29.0: ignored, the mask embedding the "
    "checkpoint ships is never loaded.",
)


def judge(source: Source) -> dict[str, Judged]:
    cls = exactly_one(source.module.classes(MODEL), f"one module-level class {MODEL}")
    if isinstance(cls, Judged):
        return {AUX.name: cls, MASK.name: cls}
    init = exactly_one(cls.defs("__init__"), f"one method {MODEL}.__init__")
    if isinstance(init, Judged):
        return {AUX.name: init, MASK.name: init}
    return {
        AUX.name: judge_run(
            source, init, AUX, f"the setting of self.use_aux_hidden_state in {MODEL}.__init__"
        ),
        MASK.name: judge_run(
            source, init, MASK, f"the setting of self.mask_token_id in {MODEL}.__init__"
        ),
    }


DRAFTER_KEYS = Edit(
    "drafter-keys",
    "vllm/model_executor/models/qwen3_dflash.py",
    "a DFlash draft's use_aux_hidden_state and mask_token_id are read at the "
    "top level of its config too, as in vLLM 0.29.0",
    Role.SEAM,
    (AUX, MASK),
    judge,
    writer="drafter_keys:DrafterKeys",
    fix=Fix("", "0.29.0"),
)
