"""Fixes: what the backport cannot serve is refused when the engine's
config is built, in one line that names the limit and the vLLM release that
lifts it, instead of a crash at load time or a silently wrong draft.

`QUANTIZED_DRAFT` (vllm/config/vllm.py, vLLM 0.31.0): a DFlash2 draft with a
quantization method. `VllmConfig._refuse_quantized_dflash2_draft()` goes
right before `_get_quantization_config`, and its call right before
`self.try_verify_and_update_config()` in `__post_init__`. 0.31.0 is the
first release that serves one (read from the 0.28.0 to 0.33.0 sources):
its DFlash2 layers pass the quantization config to the convolutions'
kernel projections, which 0.28.0 to 0.30.0 build unquantized; its DFlash
model projects the draft's context K/V through each layer's quantization
method, where 0.30.0 multiplies by the raw weight, which a quantized layer
does not hold in a form `F.linear` takes; and it offsets a quantization
config's excluded layers to the draft's layer ids. 0.32.0 changes none of
that, and 0.33.0 generalises the mapping of layer names (ModelOpt configs
through the model's weight mapper).

The refusal tests for a DFlash2 draft by its architecture: DFlash1 drafts
are left as 0.27.1 serves them. It raises
NotImplementedError, as 0.27.1 does for a method it does not support:
pydantic, which builds vLLM's configs, turns a ValueError into a validation
error of several lines, but lets this one through as it is.
Reverted, the method and its call go.
"""

from __future__ import annotations

from ...framework.config_methods import ANCHOR_CALL, CONFIG, CONFIG_CLASS, judge_refusal
from ...framework.edit import Edit, Fix, Judged, Role
from ...framework.hunk_files import HunkFiles
from ...framework.source import Source

#: Each hunk's code as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
QUANTIZED = "_refuse_quantized_dflash2_draft"
QUANTIZED_ANCHOR = "_get_quantization_config"

QUANTIZED_METHOD = HUNKS.hunk(
    "quantized draft refusal",
    f"class {CONFIG_CLASS}, right before {QUANTIZED_ANCHOR}",
    "A quantized DFlash2 draft is refused in one line naming vLLM 0.31.0, "
    "the first release that serves one, instead of failing at load time.",
)
QUANTIZED_CALL = HUNKS.hunk(
    "quantized draft refusal call",
    f"{CONFIG_CLASS}.__post_init__, right before `self.{ANCHOR_CALL}()`",
    QUANTIZED_METHOD.why,
)
#: What earlier versions of this tool wrote: their message named 0.33.0.
#: A tree they patched holds this edit, to be reverted or left as it is.
QUANTIZED_EARLIER = (QUANTIZED_METHOD.after.replace("vLLM 0.31.0 is", "vLLM 0.33.0 is"),)


def judge_quantized(source: Source) -> dict[str, Judged]:
    return judge_refusal(
        source, QUANTIZED_METHOD, QUANTIZED, QUANTIZED_ANCHOR, QUANTIZED_CALL, after=False,
        earlier=QUANTIZED_EARLIER,
    )


QUANTIZED_DRAFT = Edit(
    "refuse-quant-draft",
    CONFIG,
    "a quantized DFlash2 draft is refused in one line when the engine's "
    "config is built",
    Role.SEAM,
    (QUANTIZED_METHOD, QUANTIZED_CALL),
    judge_quantized,
    writer="refuse_quant_draft:QuantizedDraft",
    fix=Fix("", "0.31.0"),
)

assert QUANTIZED_EARLIER[0] != QUANTIZED_METHOD.after
