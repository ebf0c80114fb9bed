"""The cap on the requests a DFlash draft pass serves at once, as tables."""

import textwrap

import pytest

from dflash2_backport.transforms.edits.draft_seqs_cap.judge import CALL, METHOD, METHOD_SOURCE
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_seqs_cap.writer import DraftSeqsCap

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    swap,
    swapped,
    verdicts,
)

CONFIG = '''
@config
class VllmConfig:
    """Dataclass which contains all vllm-related configuration."""

    def __post_init__(self):
        """Verify configs are valid & consistent with each other."""

        self.try_verify_and_update_config()

        if self.compilation_config.fast_moe_cold_start is None:
            self.compilation_config.fast_moe_cold_start = (
                self.speculative_config is None
            )

        self._set_max_num_scheduled_tokens()

        self._set_cudagraph_sizes()

    def _set_max_num_scheduled_tokens(self):
        """Decrease the scheduled tokens by the slots a drafter adds."""
        if self.speculative_config is not None:
            self.scheduler_config.max_num_scheduled_tokens = 0
'''
CAP = textwrap.indent(METHOD_SOURCE, "    ") + "\n"
SET_CALL = "        self._set_max_num_scheduled_tokens()\n"
SET_METHOD = "    def _set_max_num_scheduled_tokens(self):\n"
APPLIED = swapped(
    CONFIG,
    (SET_CALL, "        self._cap_dflash_draft_seqs()\n\n" + SET_CALL),
    (SET_METHOD, CAP + SET_METHOD),
)
HUNKS = (METHOD.name, CALL.name)

ALREADY_APPLIED = {
    "the docstring a comment, the bounds on one line": swapped(
        APPLIED,
        ('        """Cap the requests that run at once to what a DFlash draft pass has\n'
         "        rows for: num_speculative_tokens + 1 query rows each, in buffers of\n"
         '        max_num_batched_tokens rows."""\n',
         "        # what the draft pass has rows for\n"),
        ("        max_draft_seqs = max_num_batched_tokens // query_rows\n",
         "        max_draft_seqs = (max_num_batched_tokens) // (query_rows)\n"),
    ),
    "the method at the end of the class": swapped(
        CONFIG,
        (SET_CALL, "        self._cap_dflash_draft_seqs()\n\n" + SET_CALL),
    ) + "\n" + CAP.rstrip("\n") + "\n",
}

DRIFT = {
    "a cap of max_num_batched_tokens // K, one request's rows short": swap(
        APPLIED,
        "        query_rows = spec.num_speculative_tokens + 1\n",
        "        query_rows = spec.num_speculative_tokens\n",
    ),
    "a cap for every method": swap(
        APPLIED,
        '        if spec is None or spec.method != "dflash" or not spec.num_speculative_tokens:\n',
        "        if spec is None or not spec.num_speculative_tokens:\n",
    ),
    "the call after the reservation instead of before it": swapped(
        CONFIG,
        (SET_CALL, SET_CALL + "\n        self._cap_dflash_draft_seqs()\n"),
        (SET_METHOD, CAP + SET_METHOD),
    ),
    "the call inside a branch": swapped(
        CONFIG,
        ("            self.compilation_config.fast_moe_cold_start = (\n",
         "            self._cap_dflash_draft_seqs()\n"
         "            self.compilation_config.fast_moe_cold_start = (\n"),
        (SET_METHOD, CAP + SET_METHOD),
    ),
    "no _set_max_num_scheduled_tokens call": swap(CONFIG, SET_CALL, ""),
    "_set_max_num_scheduled_tokens renamed": swapped(
        CONFIG,
        (SET_CALL, "        self._set_scheduled_tokens()\n"),
        (SET_METHOD, "    def _set_scheduled_tokens(self):\n"),
    ),
}


def test_a_pending_config_is_patched_then_left_alone_each_way() -> None:
    assert_patched(DraftSeqsCap, CONFIG, APPLIED)
    assert verdicts(DraftSeqsCap, CONFIG) == dict.fromkeys(HUNKS, State.PENDING)
    assert verdicts(DraftSeqsCap, APPLIED) == dict.fromkeys(HUNKS, State.APPLIED)


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED.keys())
def test_the_cap_written_otherwise_is_applied_and_reverted_by_meaning(source: str) -> None:
    assert_left_alone(DraftSeqsCap, source)
    assert verdicts(DraftSeqsCap, source) == dict.fromkeys(HUNKS, State.APPLIED)
    assert_reverted_exactly(DraftSeqsCap, source, CONFIG)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(DraftSeqsCap, source).edit == "draft-seqs-cap"


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(DraftSeqsCap, crlf(CONFIG)) == crlf(APPLIED)
    assert output(DraftSeqsCap, crlf(APPLIED), revert=True) == crlf(CONFIG)
