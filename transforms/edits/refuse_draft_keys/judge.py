"""Fix: a DFlash2 draft whose config sets a key a later vLLM reads and
0.27.1 ignores, to a value that changes the draft, is refused in one line
naming the key and the release, when the engine's config is built; it
raises as the quantized-draft refusal does (see refuse_quant_draft/judge.py
for why).

`DRAFT_KEYS` (vllm/config/vllm.py): `VllmConfig._refuse_dflash2_draft_keys()`
right before `_validate_v2_model_runner`, called right after
`self._maybe_disable_dynamic_sd_for_data_parallel()` in `__post_init__`.

`dflash_config.attention_value_scale` (vLLM 0.31.0)
    0.31.0 multiplies every draft layer's values by it, the query's and the
    context's alike, so each layer's attention output is scaled before
    `o_proj`. 0.27.1's DFlash attention, which DFlash2 inherits, has no such
    factor. Refused unless absent or 1.
`is_neox_style` (vLLM 0.29.0)
    0.29.0 reads the draft's rotary layout from the top level of its config
    (True by default); 0.27.1 builds every draft's rotary embedding in the
    neox layout. Refused unless absent or True.

Ignored, either would draft silently worse (still lossless: the target
verifies every token). DFlash1 drafts are left as 0.27.1 serves them.

Reverted, the method and its call go.
"""

from __future__ import annotations

from ...framework.config_methods import CONFIG, CONFIG_CLASS, judge_refusal
from ...framework.edit import Edit, Fix, Judged, Role
from ...framework.hunk_files import HunkFiles
from ...framework.source import Source

#: Each hunk's code as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
NAME = "_refuse_dflash2_draft_keys"
ANCHOR = "_validate_v2_model_runner"
ANCHOR_CALL = "_maybe_disable_dynamic_sd_for_data_parallel"

METHOD = HUNKS.hunk(
    "draft keys refusal",
    f"class {CONFIG_CLASS}, right before {ANCHOR}",
    "A DFlash2 draft that sets dflash_config.attention_value_scale (read from "
    "vLLM 0.31.0) or is_neox_style false (read from 0.29.0) is refused in one "
    "line naming the key, instead of drafting silently worse.",
)
CALL = HUNKS.hunk(
    "draft keys refusal call",
    f"{CONFIG_CLASS}.__post_init__, right after `self.{ANCHOR_CALL}()`",
    METHOD.why,
)


def judge(source: Source) -> dict[str, Judged]:
    return judge_refusal(source, METHOD, NAME, ANCHOR, CALL, after=True, anchor_call=ANCHOR_CALL)


DRAFT_KEYS = Edit(
    "refuse-draft-keys",
    CONFIG,
    "a DFlash2 draft that sets a config key 0.27.1 does not read is refused "
    "in one line when the engine's config is built",
    Role.SEAM,
    (METHOD, CALL),
    judge,
    writer="refuse_draft_keys:DraftKeys",
    fix=Fix("", "0.31.0"),
)
