"""A DFlash draft's top-level use_aux_hidden_state and mask_token_id (vLLM
0.29.0), as tables: 0.27.1's model (pending), the fix's (applied), and what
is neither."""

import pytest

from dflash2_backport.transforms.edits.drafter_keys.judge import AUX, MASK
from dflash2_backport.transforms.edits.drafter_keys.writer import DrafterKeys
from dflash2_backport.transforms.framework.vocabulary import State

from .._cases import assert_patched, crlf, output, refusal, swap, swapped, verdicts

NAME = "drafter-keys"
PENDING = '''
class DFlashQwen3Model(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        self.config = vllm_config.speculative_config.draft_model_config.hf_config

        drafter_config = getattr(self.config, "eagle_config", {})
        drafter_config.update(getattr(self.config, "dflash_config", {}))

        if drafter_config is not None and "use_aux_hidden_state" in drafter_config:
            self.use_aux_hidden_state = drafter_config["use_aux_hidden_state"]
        else:
            self.use_aux_hidden_state = True

        current_vllm_config = get_current_vllm_config()

        # Masked query slots are fed to the draft as `mask_token_id`.
        self.mask_token_id = drafter_config.get("mask_token_id")
        self.has_separate_mask_embedding = False
'''
AUX_0271 = (
    '        if drafter_config is not None and "use_aux_hidden_state" in drafter_config:\n'
    '            self.use_aux_hidden_state = drafter_config["use_aux_hidden_state"]\n'
    "        else:\n"
    "            self.use_aux_hidden_state = True\n"
)
AUX_FIXED = (
    "        self.use_aux_hidden_state = drafter_config.get(\n"
    '            "use_aux_hidden_state",\n'
    '            getattr(self.config, "use_aux_hidden_state", True),\n'
    "        )\n"
)
MASK_0271 = '        self.mask_token_id = drafter_config.get("mask_token_id")\n'
MASK_FIXED = (
    "        self.mask_token_id = drafter_config.get(\n"
    '            "mask_token_id", getattr(self.config, "mask_token_id", None)\n'
    "        )\n"
)
APPLIED = swapped(PENDING, (AUX_0271, AUX_FIXED), (MASK_0271, MASK_FIXED))

COSMETIC = {
    # (0.27.1's code in other words, what the fix makes of it)
    "a comment at the end of the line is kept after the fix": (
        swap(PENDING, MASK_0271, MASK_0271.rstrip("\n") + "  # slot\n"),
        swap(APPLIED, MASK_FIXED, MASK_FIXED.rstrip("\n") + "  # slot\n"),
    ),
}

ALREADY_APPLIED = {
    "0.29.0's fallbacks written on one line each": swapped(
        PENDING,
        (AUX_0271, "        self.use_aux_hidden_state = drafter_config.get("
                   "'use_aux_hidden_state', getattr(self.config, 'use_aux_hidden_state', True))\n"),
        (MASK_0271, "        self.mask_token_id = drafter_config.get("
                    "'mask_token_id', getattr(self.config, 'mask_token_id', None))\n"),
    ),
}

DRIFT = {
    # (source, the hunk refused)
    "use_aux_hidden_state off by default": (
        swap(PENDING, "            self.use_aux_hidden_state = True\n",
             "            self.use_aux_hidden_state = False\n"),
        AUX.name,
    ),
    "a fallback that reads the top level first": (
        swap(APPLIED, MASK_FIXED,
             '        self.mask_token_id = getattr(self.config, "mask_token_id", None)\n'),
        MASK.name,
    ),
    "the mask token read twice": (
        swap(PENDING, MASK_0271, MASK_0271 * 2),
        MASK.name,
    ),
    "no DFlashQwen3Model": (PENDING.replace("DFlashQwen3Model", "DFlashModel"), AUX.name),
}


def test_the_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(DrafterKeys, PENDING)) == [AUX.name, MASK.name]


@pytest.mark.parametrize(
    "before,after", [(PENDING, APPLIED), *COSMETIC.values()], ids=["0.27.1", *COSMETIC]
)
def test_pending_code_is_patched_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(DrafterKeys, before, after)
    assert set(verdicts(DrafterKeys, before).values()) == {State.PENDING}
    assert set(verdicts(DrafterKeys, after).values()) == {State.APPLIED}


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED)
def test_the_fix_written_otherwise_is_applied_and_left_alone(source: str) -> None:
    assert set(verdicts(DrafterKeys, source).values()) == {State.APPLIED}
    assert output(DrafterKeys, source) == source
    # Reverted, 0.27.1's statements in 0.27.1's words.
    assert output(DrafterKeys, source, revert=True) == PENDING


@pytest.mark.parametrize("source,hunk", DRIFT.values(), ids=DRIFT)
def test_code_that_is_neither_is_refused(source: str, hunk: str) -> None:
    refused = refusal(DrafterKeys, source)
    assert refused.edit == NAME
    assert hunk in [h.hunk for h in refused.drifted]


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(DrafterKeys, crlf(PENDING)) == crlf(APPLIED)
    assert output(DrafterKeys, crlf(APPLIED), revert=True) == crlf(PENDING)
