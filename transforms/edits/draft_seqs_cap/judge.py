"""Fix: no more requests run at once than a DFlash draft pass has rows for.

Target: vllm/config/vllm.py, two hunks.

`VllmConfig._cap_dflash_draft_seqs()` goes right before
`_set_max_num_scheduled_tokens`, and its call right before
`self._set_max_num_scheduled_tokens()` in `__post_init__`. For a DFlash
draft (DFlash1 or DFlash2: method "dflash") it lowers
`scheduler_config.max_num_seqs` to
`max_num_batched_tokens // (num_speculative_tokens + 1)` where that is
smaller, with a warning, and raises where not one request fits.

Why: a DFlash draft pass gives every request of the batch
`num_speculative_tokens + 1` query rows (the bonus token and one mask token
per draft token), written into the drafter's input buffers, which hold
`max_num_batched_tokens` rows (0.27.1's `DraftModelSpeculator` sizes
`InputBuffers`, the query slot mappings and the hidden states so; the V1
`DFlashProposer` its `input_ids`). 0.27.1 reserves `(K - 1) * max_num_seqs`
tokens of `max_num_batched_tokens` for parallel drafting, one request's worth short of
the query pass: with `max_num_batched_tokens` between
`(K - 1) * max_num_seqs` and `(K + 1) * max_num_seqs`, a step that schedules
many requests with a token or two each (short prompts arriving together,
the tails of chunked prefills) needs more query rows than the buffers hold,
and the prepare-inputs kernel writes past them. vLLM 0.33.0 caps the
requests it admits to RUNNING to the same quotient (its
`max_num_active_seqs`, set in `VllmConfig`); 0.27.1 has no such field and
admits `max_num_seqs` requests, so here the cap is `max_num_seqs` itself.
Placed before the reservation, it also lets that reservation count only the
requests that can run.

DSpark drafts, whose query layout depends on `sample_from_anchor`, are left
as 0.27.1 serves them.

Reverted, the method and its call go, each with the comment above it.
"""

from __future__ import annotations

from ...framework.edit import Edit, Fix, Judged, Role
from ...framework.hunk_files import HunkFiles
from ...framework.judging import is_call_of, method_before, statement_beside
from ...framework.config_methods import CONFIG, CONFIG_CLASS, config_parts
from ...framework.source import Source

NAME = "_cap_dflash_draft_seqs"
ANCHOR = "_set_max_num_scheduled_tokens"
#: Each hunk's code as 0.27.1 ships it and as the edit leaves it: hunks/.
HUNKS = HunkFiles(__package__)
METHOD_SOURCE = HUNKS.patched("draft request cap")

WHY = (
    "At most max_num_batched_tokens // (num_speculative_tokens + 1) requests "
    "run at once with a DFlash draft, as in vLLM 0.33.0: a DFlash draft pass "
    "gives each request K + 1 query rows in buffers of max_num_batched_tokens "
    "rows, which many requests of a token or two each overflow."
)
METHOD = HUNKS.hunk(
    "draft request cap",
    f"class {CONFIG_CLASS}, right before {ANCHOR}",
    WHY,
)
CALL = HUNKS.hunk(
    "draft request cap call",
    f"{CONFIG_CLASS}.__post_init__, right before `self.{ANCHOR}()`",
    WHY,
)


def judge(source: Source) -> dict[str, Judged]:
    parts = config_parts(source)
    if isinstance(parts, Judged):
        return {METHOD.name: parts, CALL.name: parts}
    cls, post_init = parts
    return {
        METHOD.name: method_before(
            cls,
            METHOD.after,
            ANCHOR,
            expected=f"{CONFIG_CLASS}.{NAME} as the fix writes it",
            remedy="remove or rename it",
        ),
        CALL.name: statement_beside(
            post_init,
            lambda s: is_call_of(s, "self", ANCHOR),
            f"`self.{ANCHOR}()`",
            CALL.after,
            after=False,
        ),
    }


DRAFT_SEQS_CAP = Edit(
    "draft-seqs-cap",
    CONFIG,
    "at most max_num_batched_tokens // (K + 1) requests run at once with a "
    "DFlash draft, as in vLLM 0.33.0",
    Role.SEAM,
    (METHOD, CALL),
    judge,
    writer="draft_seqs_cap:DraftSeqsCap",
    fix=Fix("", "0.33.0"),
)
