"""The one ordered list of the edits.

Each edit lives in a folder of its own here, named as the edit (in Python's
spelling: `draft-max-position` in `draft_max_position/`): its judge and
declarations in `judge.py`, its libcst writer in `writer.py`. An edit that
spans two files declares one `Edit` per file in the same folder.
"""

from __future__ import annotations

import importlib

from ..framework.edit import Edit

#: The edits, in upstream order, as "FOLDER:NAME": the declaration NAME in
#: FOLDER/judge.py.
DECLARATIONS = (
    "causality:CAUSALITY",
    "subclass_seams:SUBCLASS_SEAMS",
    "registry:REGISTRY",
    "vocab_parallel_topk:VOCAB_PARALLEL_TOPK",
    "gumbel:GUMBEL",
    "speculator_selection:SPECULATOR_SELECTION",
    "speculator_selection:V2_RUNNER_FORCING",
    "draft_logit_cache:DRAFT_LOGIT_CACHE",
    # The upstream fixes the DFlash2 path depends on (`Edit.fix`).
    "draft_max_position:DRAFT_POSITIONS",
    "draft_max_position:MAX_MODEL_LEN_CAP",
    "compile_cache_key:COMPILE_CACHE_KEY",
    "refuse_quant_draft:QUANTIZED_DRAFT",
    "refuse_vocab_draft:DRAFT_VOCABULARY",
    "refuse_speculators:SPECULATORS_FORMAT",
    "refuse_draft_keys:DRAFT_KEYS",
    "dflash_input_guards:DFLASH_INPUT_GUARDS",
    "draft_aot_schedule:DRAFT_AOT_SCHEDULE",
    "draft_noise_salt:GUMBEL_STREAMS",
    "draft_noise_salt:DRAFT_SAMPLING",
    "draft_noise_salt:DSPARK_SAMPLING",
    "dflash_prefix_block:PREFIX_BLOCK_DROP",
    "anchor_clamp:ANCHOR_CLAMP",
    "draft_conv_kernel:DRAFT_CONV_KERNEL",
    "drafter_keys:DRAFTER_KEYS",
    "draft_seqs_cap:DRAFT_SEQS_CAP",
    "live_model_len:LIVE_MODEL_LEN",
    "spec_step_seed:STEP_SEED",
    "spec_step_seed:BLOCK_UNIFORM",
)


def _declared(name: str) -> Edit:
    folder, attribute = name.split(":")
    edit = getattr(importlib.import_module(f".{folder}.judge", __name__), attribute)
    assert isinstance(edit, Edit), name
    return edit


EDITS: tuple[Edit, ...] = tuple(_declared(name) for name in DECLARATIONS)
