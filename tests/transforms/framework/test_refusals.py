"""The refusals of what the backport cannot serve, as tables."""

import textwrap

import pytest

from dflash2_backport.transforms.edits.refuse_draft_keys.judge import METHOD as KEYS_METHOD
from dflash2_backport.transforms.edits.refuse_draft_keys.writer import DraftKeys
from dflash2_backport.transforms.edits.refuse_quant_draft.judge import (
    QUANTIZED_CALL,
    QUANTIZED_METHOD,
)
from dflash2_backport.transforms.edits.refuse_vocab_draft.judge import (
    VOCABULARY_CALL,
    VOCABULARY_METHOD,
)
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.refuse_quant_draft.writer import QuantizedDraft
from dflash2_backport.transforms.edits.refuse_speculators.writer import SpeculatorsFormat
from dflash2_backport.transforms.edits.refuse_vocab_draft.writer import DraftVocabulary

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

# -- config/vllm.py ---------------------------------------------------------------

CONFIG = '''
@config
class VllmConfig:
    """Dataclass which contains all vllm-related configuration."""

    def _dflash_needs_multi_kv_group(self) -> bool:
        """Whether a DFlash draft mixes sliding-window and full attention."""
        return False

    def _is_default_v2_model_runner_model(self) -> bool:
        return True

    @staticmethod
    def _get_quantization_config(model_config, load_config):
        """Get the quantization config."""
        return None

    def __post_init__(self):
        """Verify configs are valid & consistent with each other."""

        if self.performance_mode != "balanced":
            logger.info_once("Performance mode set to '%s'.", self.performance_mode)

        self.try_verify_and_update_config()

        if self.model_config is not None:
            self.parallel_config.is_moe_model = self.model_config.is_moe
'''


def _in_class(method: str) -> str:
    """A method of the hunk files (written at module level) as VllmConfig's
    body holds it, with the blank line after it."""
    return textwrap.indent(method, "    ") + "\n"


QUANTIZED = _in_class(QUANTIZED_METHOD.after)
VOCABULARY = _in_class(VOCABULARY_METHOD.after)
TRY_VERIFY = "        self.try_verify_and_update_config()\n"
QUANTIZED_APPLIED = swapped(
    CONFIG,
    ("    @staticmethod\n    def _get_quantization_config(",
     QUANTIZED + "    @staticmethod\n    def _get_quantization_config("),
    (TRY_VERIFY, "        self._refuse_quantized_dflash2_draft()\n\n" + TRY_VERIFY),
)
VOCABULARY_APPLIED = swapped(
    CONFIG,
    ("    def _is_default_v2_model_runner_model(",
     VOCABULARY + "    def _is_default_v2_model_runner_model("),
    (TRY_VERIFY, TRY_VERIFY + "\n        self._refuse_dflash2_vocabulary_mismatch()\n"),
)
BOTH_APPLIED = swapped(
    QUANTIZED_APPLIED,
    ("    def _is_default_v2_model_runner_model(",
     VOCABULARY + "    def _is_default_v2_model_runner_model("),
    (TRY_VERIFY, TRY_VERIFY + "\n        self._refuse_dflash2_vocabulary_mismatch()\n"),
)

CONFIG_SEMANTIC = {
    "no try_verify_and_update_config call": swap(CONFIG, TRY_VERIFY, ""),
    "try_verify_and_update_config called twice": swap(CONFIG, TRY_VERIFY, TRY_VERIFY * 2),
    "the refusal inside a branch": swap(
        CONFIG,
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n",
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n"
        "            self._refuse_quantized_dflash2_draft()\n"
        "            self._refuse_dflash2_vocabulary_mismatch()\n",
    ),
    "a refusal of DFlash1 drafts too": swapped(
        BOTH_APPLIED,
        ('        if "DFlash2DraftModel" not in (draft.architectures or []):\n'
         "            return\n        if draft.quantization", "        if draft.quantization"),
        ('        if "DFlash2DraftModel" not in (draft.architectures or []):\n'
         "            return\n        target_vocab_size", "        target_vocab_size"),
    ),
    "the anchor methods renamed": swapped(
        CONFIG,
        ("def _get_quantization_config(", "def _quantization_config("),
        ("def _is_default_v2_model_runner_model(", "def _default_v2_model("),
    ),
}


@pytest.mark.parametrize(
    "transform,applied",
    [(QuantizedDraft, QUANTIZED_APPLIED), (DraftVocabulary, VOCABULARY_APPLIED)],
    ids=["quantized", "vocabulary"],
)
def test_each_refusal_is_patched_then_left_alone_each_way(transform, applied: str) -> None:
    assert_patched(transform, CONFIG, applied)
    assert set(verdicts(transform, CONFIG).values()) == {State.PENDING}
    assert set(verdicts(transform, applied).values()) == {State.APPLIED}


def test_the_two_refusals_stand_on_either_side_of_the_same_call() -> None:
    assert_patched(QuantizedDraft, VOCABULARY_APPLIED, BOTH_APPLIED)
    assert_patched(DraftVocabulary, QUANTIZED_APPLIED, BOTH_APPLIED)
    assert verdicts(QuantizedDraft, BOTH_APPLIED) == {
        QUANTIZED_METHOD.name: State.APPLIED, QUANTIZED_CALL.name: State.APPLIED
    }
    assert verdicts(DraftVocabulary, BOTH_APPLIED) == {
        VOCABULARY_METHOD.name: State.APPLIED, VOCABULARY_CALL.name: State.APPLIED
    }


@pytest.mark.parametrize("source", CONFIG_SEMANTIC.values(), ids=CONFIG_SEMANTIC)
@pytest.mark.parametrize("transform", [QuantizedDraft, DraftVocabulary])
def test_semantic_variants_are_refused(transform, source: str) -> None:
    assert refusal(transform, source).edit == transform.EDIT.name


def test_a_refusal_written_on_fewer_lines_is_applied_and_reverted_by_meaning() -> None:
    otherwise = swap(
        QUANTIZED_APPLIED,
        '        """Refuse a quantized DFlash2 draft in one line, before it is loaded."""\n',
        "        # refused before the draft is loaded\n",
    )
    assert_left_alone(QuantizedDraft, otherwise)
    assert_reverted_exactly(QuantizedDraft, otherwise, CONFIG)


def test_a_refusal_an_earlier_version_wrote_naming_0_33_0_is_applied_and_reverted() -> None:
    """Earlier versions of the tool named 0.33.0 as the first release to
    serve quantized drafts (0.31.0 is): a tree they patched must not read
    as drift, or the tool could no longer take out its own edit."""
    earlier = swap(QUANTIZED_APPLIED, "vLLM 0.31.0 is the first", "vLLM 0.33.0 is the first")
    assert set(verdicts(QuantizedDraft, earlier).values()) == {State.APPLIED}
    assert_left_alone(QuantizedDraft, earlier)
    assert_reverted_exactly(QuantizedDraft, earlier, CONFIG)
    other = swap(QUANTIZED_APPLIED, "vLLM 0.31.0 is the first", "vLLM 0.32.0 is the first")
    assert refusal(QuantizedDraft, other).edit == QuantizedDraft.EDIT.name


# -- config/vllm.py: draft config keys --------------------------------------------------

KEYS_CONFIG = '''
@config
class VllmConfig:
    def __post_init__(self):
        """Verify configs are valid & consistent with each other."""
        self.try_verify_and_update_config()

        self._maybe_disable_dynamic_sd_for_data_parallel()
        self._maybe_override_dynamic_sd_cudagraph_mode()

    def _validate_v2_model_runner(self) -> None:
        """Check for features not yet supported by the V2 model runner."""
        unsupported = self._get_v2_model_runner_unsupported_features()
'''
KEYS_ANCHOR_CALL = "        self._maybe_disable_dynamic_sd_for_data_parallel()\n"
KEYS_CALL = "        self._refuse_dflash2_draft_keys()\n"
KEYS_APPLIED = swapped(
    KEYS_CONFIG,
    (KEYS_ANCHOR_CALL, KEYS_ANCHOR_CALL + KEYS_CALL),
    ("    def _validate_v2_model_runner(",
     _in_class(KEYS_METHOD.after) + "    def _validate_v2_model_runner("),
)
KEYS_SEMANTIC = {
    "the call after the cudagraph override instead": swapped(
        KEYS_APPLIED,
        (KEYS_CALL, ""),
        ("        self._maybe_override_dynamic_sd_cudagraph_mode()\n",
         "        self._maybe_override_dynamic_sd_cudagraph_mode()\n" + KEYS_CALL),
    ),
    "a value scale of 1 refused too": swap(
        KEYS_APPLIED, "if value_scale is not None and value_scale != 1:",
        "if value_scale is not None:",
    ),
    "a refusal of DFlash1 drafts too": swap(
        KEYS_APPLIED,
        '        if "DFlash2DraftModel" not in (draft.architectures or []):\n            return\n',
        "",
    ),
    "no _maybe_disable_dynamic_sd_for_data_parallel call": swap(
        KEYS_CONFIG, KEYS_ANCHOR_CALL, ""
    ),
    "no _validate_v2_model_runner": swap(
        KEYS_CONFIG, "def _validate_v2_model_runner(", "def _check_v2_model_runner("
    ),
}


def test_the_draft_keys_refusal_is_patched_then_left_alone_each_way() -> None:
    assert_patched(DraftKeys, KEYS_CONFIG, KEYS_APPLIED)
    assert set(verdicts(DraftKeys, KEYS_CONFIG).values()) == {State.PENDING}
    assert set(verdicts(DraftKeys, KEYS_APPLIED).values()) == {State.APPLIED}
    assert output(DraftKeys, crlf(KEYS_CONFIG)) == crlf(KEYS_APPLIED)


@pytest.mark.parametrize("source", KEYS_SEMANTIC.values(), ids=KEYS_SEMANTIC)
def test_semantic_variants_of_the_draft_keys_refusal_are_refused(source: str) -> None:
    assert refusal(DraftKeys, source).edit == "refuse-draft-keys"


# -- transformers_utils/configs/speculators/base.py ---------------------------------

SPECULATORS = '''
from vllm.transformers_utils.configs.speculators.algos import (
    SUPPORTED_SPECULATORS_TYPES,
)


class SpeculatorsConfig(PretrainedConfig):
    model_type = "speculators"

    @classmethod
    def extract_transformers_pre_trained_config(
        cls, config_dict: dict[str, Any]
    ) -> dict[str, Any]:
        """
        Extract standard Transformers PreTrainedConfig config from speculators config.
        """
        speculators_model_type = config_dict.get("speculators_model_type")
        if speculators_model_type not in SUPPORTED_SPECULATORS_TYPES:
            raise NotImplementedError(
                f"Expected one of: {SUPPORTED_SPECULATORS_TYPES}. "
                "Please ensure you're loading a speculators-format model."
            )
        return config_dict.get("transformer_layer_config", {})

    @classmethod
    def build_vllm_speculative_config(
        cls, config_dict: dict[str, Any]
    ) -> dict[str, Any]:
        """Build vLLM-compatible speculative configuration."""
        result = {
            "method": config_dict.get("speculators_model_type"),
            "num_speculative_tokens": 3,
        }
        if result["method"] == "peagle":
            result.update({"method": "eagle3", "parallel_drafting": True})
        return result
'''
REFUSAL = """
        # The backport reads DFlash2 drafts in their own format only: refused
        # here in one line, not in a validation error that lists methods.
        if {test}:
            raise NotImplementedError(
                "Speculators-format dflash2 checkpoints are not read by this DFlash2 "
                "backport to vLLM 0.27.1, which reads a DFlash2 draft in its own format "
                "(architectures ['DFlash2DraftModel']); vLLM 0.29.0 is the first release "
                "that reads the Speculators format for DFlash2"
            )
"""
TYPE_ANCHOR = "        if speculators_model_type not in SUPPORTED_SPECULATORS_TYPES:\n"
SPECULATORS_APPLIED = swapped(
    SPECULATORS,
    (TYPE_ANCHOR, REFUSAL.format(test='speculators_model_type == "dflash2"') + TYPE_ANCHOR),
    ("        return result\n",
     REFUSAL.format(test='result["method"] == "dflash2"') + "        return result\n"),
)

SPECULATORS_SEMANTIC = {
    "the type check reads another table": swap(
        SPECULATORS,
        "if speculators_model_type not in SUPPORTED_SPECULATORS_TYPES:",
        "if speculators_model_type not in KNOWN_TYPES:",
    ),
    "a dflash2 refusal of another meaning already there": swap(
        SPECULATORS,
        '            result.update({"method": "eagle3", "parallel_drafting": True})\n',
        '            result.update({"method": "eagle3", "parallel_drafting": True})\n'
        '        if result["method"] == "dflash2":\n            raise NotImplementedError("no")\n',
    ),
    "0.29.0's mapping of dflash2 to dflash": swap(
        SPECULATORS,
        '            result.update({"method": "eagle3", "parallel_drafting": True})\n',
        '            result.update({"method": "eagle3", "parallel_drafting": True})\n'
        '        elif result["method"] == "dflash2":\n            result["method"] = "dflash"\n',
    ),
    "no return at the end of build_vllm_speculative_config": swap(
        SPECULATORS, "        return result\n", "        yield result\n"
    ),
}


def test_the_speculators_refusals_are_patched_then_left_alone_each_way() -> None:
    assert_patched(SpeculatorsFormat, SPECULATORS, SPECULATORS_APPLIED)
    assert set(verdicts(SpeculatorsFormat, SPECULATORS).values()) == {State.PENDING}
    assert set(verdicts(SpeculatorsFormat, SPECULATORS_APPLIED).values()) == {State.APPLIED}


@pytest.mark.parametrize("source", SPECULATORS_SEMANTIC.values(), ids=SPECULATORS_SEMANTIC)
def test_semantic_variants_of_the_speculators_file_are_refused(source: str) -> None:
    assert refusal(SpeculatorsFormat, source).edit == "refuse-speculators"


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(SpeculatorsFormat, crlf(SPECULATORS)) == crlf(SPECULATORS_APPLIED)
    assert output(SpeculatorsFormat, crlf(SPECULATORS_APPLIED), revert=True) == crlf(SPECULATORS)
    assert output(QuantizedDraft, crlf(CONFIG)) == crlf(QUANTIZED_APPLIED)
