"""The speculators' model length read live (vLLM 0.33.0), as tables: 0.27.1's
speculator (pending), the fix's (applied), and what is neither."""

import pytest

from dflash2_backport.transforms.edits.live_model_len.judge import PROPERTY, READ_LIVE
from dflash2_backport.transforms.edits.live_model_len.writer import LiveModelLen
from dflash2_backport.transforms.framework.vocabulary import State

from .._cases import (
    assert_applied_and_reverted_exactly,
    assert_patched,
    crlf,
    output,
    refusal,
    swap,
    swapped,
    verdicts,
)

NAME = "live-model-len"
PENDING = '''
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.vllm_config = vllm_config
        self.scheduler_config = vllm_config.scheduler_config
        self.max_num_reqs = self.scheduler_config.max_num_seqs
        self.max_num_tokens = self.scheduler_config.max_num_batched_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.draft_max_seq_len = self.max_model_len
        self.vocab_size = self.draft_model_config.get_vocab_size()

    @abstractmethod
    def load_draft_model(self, target_model, target_attn_layer_names):
        pass

    def _build_draft_attn_metadata(self, num_reqs):
        seq_lens.clamp_(max=self.max_model_len)
'''
ASSIGNMENT = "        self.max_model_len = vllm_config.model_config.max_model_len\n"
ANCHOR = "    @abstractmethod\n    def load_draft_model("
LIVE = (
    "    @property\n"
    "    def max_model_len(self) -> int:\n"
    "        # Auto-fit can lower the limit after the speculator is built.\n"
    "        return self.vllm_config.model_config.max_model_len\n"
    "\n"
)
APPLIED = swapped(PENDING, (ASSIGNMENT, ""), (ANCHOR, LIVE + ANCHOR))
HUNKS = [READ_LIVE.name, PROPERTY.name]

COSMETIC = {
    "the other assignments reformatted are kept as written": (
        swap(
            PENDING,
            "        self.max_num_tokens = self.scheduler_config.max_num_batched_tokens\n",
            "        self.max_num_tokens = (\n"
            "            self.scheduler_config.max_num_batched_tokens\n"
            "        )  # the token budget\n",
        ),
        swap(
            APPLIED,
            "        self.max_num_tokens = self.scheduler_config.max_num_batched_tokens\n",
            "        self.max_num_tokens = (\n"
            "            self.scheduler_config.max_num_batched_tokens\n"
            "        )  # the token budget\n",
        ),
    ),
}

ALREADY_APPLIED = {
    # (the fix written otherwise, what revert makes of it)
    "the property with a docstring instead of the comment, at the end of the class": (
        swap(APPLIED, LIVE, "")
        + "\n"
        "    @property\n"
        "    def max_model_len(self) -> int:\n"
        '        """Read live: auto-fit lowers it."""\n'
        "        return self.vllm_config.model_config.max_model_len\n",
        PENDING,
    ),
}

DRIFT = {
    # (source, the hunk refused, a phrase its reason holds)
    "the length cached under another name too": (
        swap(
            PENDING,
            "        self.vocab_size = self.draft_model_config.get_vocab_size()\n",
            "        self.vocab_size = self.draft_model_config.get_vocab_size()\n"
            "        self.max_model_len = min(self.max_model_len, 4096)\n",
        ),
        READ_LIVE.name,
        "line 10",
    ),
    "the applied file sets the length again, which the property refuses": (
        swap(
            APPLIED,
            "        seq_lens.clamp_(max=self.max_model_len)\n",
            "        self.max_model_len = num_reqs\n",
        ),
        READ_LIVE.name,
        "read-only",
    ),
    "the length read from the scheduler's config": (
        swap(
            PENDING,
            ASSIGNMENT,
            "        self.max_model_len = self.scheduler_config.max_model_len\n",
        ),
        READ_LIVE.name,
        "none",
    ),
    "a property that returns the length built with": (
        swap(
            APPLIED,
            "        return self.vllm_config.model_config.max_model_len\n",
            "        return self._max_model_len\n",
        ),
        PROPERTY.name,
        "read-only property",
    ),
    "no load_draft_model to place the property before": (
        PENDING.replace("load_draft_model", "load_drafter"),
        PROPERTY.name,
        "load_draft_model",
    ),
}


def test_the_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(LiveModelLen, PENDING)) == HUNKS


@pytest.mark.parametrize(
    "before,after", [(PENDING, APPLIED), *COSMETIC.values()], ids=["0.27.1", *COSMETIC]
)
def test_pending_code_is_patched_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(LiveModelLen, before, after)
    assert set(verdicts(LiveModelLen, before).values()) == {State.PENDING}
    assert set(verdicts(LiveModelLen, after).values()) == {State.APPLIED}


@pytest.mark.parametrize("source,back", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED)
def test_the_fix_written_otherwise_is_applied_and_reverts_exactly(source: str, back: str) -> None:
    assert set(verdicts(LiveModelLen, source).values()) == {State.APPLIED}
    assert_applied_and_reverted_exactly(LiveModelLen, source, back)


@pytest.mark.parametrize("source,hunk,found", DRIFT.values(), ids=DRIFT)
def test_code_that_is_neither_is_refused_naming_what_it_found(
    source: str, hunk: str, found: str
) -> None:
    refused = refusal(LiveModelLen, source)
    assert refused.edit == NAME
    (drifted,) = [h for h in refused.drifted if h.hunk == hunk]
    assert found in drifted.reason, drifted.reason


def test_a_comment_above_the_assignment_goes_with_it_and_revert_writes_the_assignment_alone() -> None:
    commented = swap(PENDING, ASSIGNMENT, "        # the target's length\n" + ASSIGNMENT)
    assert output(LiveModelLen, commented) == APPLIED
    assert output(LiveModelLen, APPLIED, revert=True) == PENDING


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(LiveModelLen, crlf(PENDING)) == crlf(APPLIED)
    assert output(LiveModelLen, crlf(APPLIED), revert=True) == crlf(PENDING)
