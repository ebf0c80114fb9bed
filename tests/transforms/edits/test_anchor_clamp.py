import pytest

from dflash2_backport.transforms.edits.anchor_clamp.judge import FUNCTION
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.anchor_clamp.writer import AnchorClamp

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    verdicts,
)

HEADER = """
import torch
from transformers import Qwen3Config

from vllm.config import VllmConfig

_SLIDING_ATTENTION = "sliding_attention"


def dflash_has_any_non_causal(config: Qwen3Config) -> bool:
    return not all(_dflash_layer_causal(config, i) for i in range(config.num_hidden_layers))
"""

CLAMP = "\n\n" + FUNCTION

ANCHOR = """

def _get_dflash_fc_input_size(vllm_config: VllmConfig) -> int:
    config = vllm_config.speculative_config.draft_model_config.hf_config
    return config.hidden_size * config.num_hidden_layers
"""

PENDING = HEADER + ANCHOR
APPLIED = HEADER + CLAMP + ANCHOR
HUNK = "anchor clamp"

# vLLM 0.26.0: no `_get_dflash_fc_input_size`; the model computes the fc
# layer's width in its __init__, and `_resolve_layer_attention` follows.
INLINE = """

def _resolve_layer_attention(config: Qwen3Config, index: int) -> str:
    return _SLIDING_ATTENTION


class DFlashQwen3Model(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        if config.use_aux_hidden_state:
            fc_input_size = config.hidden_size * config.num_hidden_layers
            self.fc = nn.Linear(fc_input_size, config.hidden_size)
"""
PENDING_0_26 = HEADER + INLINE
APPLIED_0_26 = HEADER + CLAMP + INLINE

PATCHED = {
    "inserted before _get_dflash_fc_input_size": (PENDING, APPLIED),
    "a comment above the anchor stays with it": (
        swap(PENDING, "\n\ndef _get_dflash_fc_input_size(",
             "\n\n# The fc layer's input width.\ndef _get_dflash_fc_input_size("),
        swap(APPLIED, "\n\ndef _get_dflash_fc_input_size(",
             "\n\n# The fc layer's input width.\ndef _get_dflash_fc_input_size("),
    ),
    "0.26.0, the width computed inline: before _resolve_layer_attention": (
        PENDING_0_26, APPLIED_0_26,
    ),
}

ALREADY_APPLIED = {
    "on one line, another docstring, keyword bounds": swap(
        swap(
            APPLIED,
            "def dflash_anchors_in_vocab(\n    anchor_token_ids: torch.Tensor, vocab_size: int\n"
            ") -> torch.Tensor:",
            "def dflash_anchors_in_vocab(anchor_token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:",
        ),
        '"""Anchor (bonus) token ids clamped into a draft\'s vocabulary.',
        '"""Keep anchors in range.',
    ),
    "at the end of the file": HEADER + ANCHOR + CLAMP,
}

DRIFT = {
    "clamped to the vocabulary size, one past the last row": swap(
        APPLIED, "clamp(0, vocab_size - 1)", "clamp(0, vocab_size)"
    ),
    "no lower bound": swap(
        APPLIED, "clamp(0, vocab_size - 1)", "clamp(max=vocab_size - 1)"
    ),
    "a pending file with a function of that name doing something else": swap(
        PENDING,
        "\n\ndef _get_dflash_fc_input_size(",
        "\n\ndef dflash_anchors_in_vocab(anchor_token_ids, vocab_size):\n"
        "    return anchor_token_ids % vocab_size\n\n\ndef _get_dflash_fc_input_size(",
    ),
    "_get_dflash_fc_input_size renamed": swap(
        PENDING, "def _get_dflash_fc_input_size(", "def _fc_input_size("
    ),
    "torch not imported at module level": swap(PENDING, "import torch\n", ""),
    "0.26.0's form with the width no longer assigned in the model": swap(
        PENDING_0_26, "fc_input_size = config.hidden_size", "width = config.hidden_size"
    ),
    "0.26.0's form without _resolve_layer_attention": swap(
        PENDING_0_26, "def _resolve_layer_attention(", "def _layer_attention("
    ),
}

REVERT_REFUSED = {
    "called by another function of the module": (
        APPLIED + "\n\ndef anchors(ids, n):\n    return dflash_anchors_in_vocab(ids, n)\n",
        "`anchors`",
    ),
}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_file_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(AnchorClamp, before, after)
    assert verdicts(AnchorClamp, before) == {HUNK: State.PENDING}
    assert verdicts(AnchorClamp, after) == {HUNK: State.APPLIED}


@pytest.mark.parametrize(
    "source", [APPLIED, *ALREADY_APPLIED.values()], ids=["as written", *ALREADY_APPLIED]
)
def test_the_function_written_any_way_counts_as_applied(source: str) -> None:
    assert_left_alone(AnchorClamp, source)
    assert verdicts(AnchorClamp, source) == {HUNK: State.APPLIED}


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED.keys())
def test_an_applied_form_written_otherwise_is_reverted_by_meaning(source: str) -> None:
    assert_reverted_exactly(AnchorClamp, source, PENDING)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(AnchorClamp, source).edit == "anchor-clamp"


def test_a_missing_anchor_and_a_missing_import_are_both_named() -> None:
    source = swap(DRIFT["_get_dflash_fc_input_size renamed"], "import torch\n", "")
    (drifted,) = refusal(AnchorClamp, source).drifted
    assert "_get_dflash_fc_input_size" in drifted.reason
    assert "`torch`" in drifted.reason


@pytest.mark.parametrize("source,caller", REVERT_REFUSED.values(), ids=REVERT_REFUSED)
def test_a_function_other_code_calls_is_not_removed(source: str, caller: str) -> None:
    (drifted,) = revert_refusal(AnchorClamp, source).drifted
    assert drifted.hunk == HUNK
    assert caller in drifted.reason


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(AnchorClamp, crlf(PENDING)) == crlf(APPLIED)
    assert output(AnchorClamp, crlf(APPLIED), revert=True) == crlf(PENDING)
