"""Fix: a DFlash2 draft whose vocabulary is not the target's is refused,
in one line naming the release that lifts the limit, when the engine's
config is built; it raises as the quantized-draft refusal does (see
refuse_quant_draft/judge.py for why).

`DRAFT_VOCABULARY` (vllm/config/vllm.py, vLLM 0.34.0):
`VllmConfig._refuse_dflash2_vocabulary_mismatch()` right before
`_is_default_v2_model_runner_model`, called right after
`self.try_verify_and_update_config()`. The DFlash2 candidate selector
indexes the draft's codebooks with the target head's token ids, so it needs
the two vocabularies equal; 0.34.0 serves a draft vocabulary smaller than
the target's, and no release through 0.34.0 maps a reduced draft
vocabulary (`draft_vocab_size`) for DFlash2.

Reverted, the method and its call go.
"""

from __future__ import annotations

from ...framework.config_methods import ANCHOR_CALL, CONFIG, CONFIG_CLASS, judge_refusal
from ...framework.edit import Edit, Fix, Judged, Role
from ...framework.hunk_files import HunkFiles
from ...framework.source import Source

#: Each hunk's code as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
VOCABULARY = "_refuse_dflash2_vocabulary_mismatch"
VOCABULARY_ANCHOR = "_is_default_v2_model_runner_model"

VOCABULARY_METHOD = HUNKS.hunk(
    "vocabulary refusal",
    f"class {CONFIG_CLASS}, right before {VOCABULARY_ANCHOR}",
    "A DFlash2 draft whose vocabulary is not the target's is refused in one "
    "line (vLLM 0.34.0 serves a smaller one), instead of drafting from "
    "mismatched token ids.",
)
VOCABULARY_CALL = HUNKS.hunk(
    "vocabulary refusal call",
    f"{CONFIG_CLASS}.__post_init__, right after `self.{ANCHOR_CALL}()`",
    VOCABULARY_METHOD.why,
)


def judge_vocabulary(source: Source) -> dict[str, Judged]:
    return judge_refusal(
        source, VOCABULARY_METHOD, VOCABULARY, VOCABULARY_ANCHOR, VOCABULARY_CALL, after=True
    )


DRAFT_VOCABULARY = Edit(
    "refuse-vocab-draft",
    CONFIG,
    "a DFlash2 draft whose vocabulary is not the target's is refused in one "
    "line when the engine's config is built",
    Role.SEAM,
    (VOCABULARY_METHOD, VOCABULARY_CALL),
    judge_vocabulary,
    writer="refuse_vocab_draft:DraftVocabulary",
    fix=Fix("", "0.34.0"),
)
