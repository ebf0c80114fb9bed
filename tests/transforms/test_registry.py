import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms._base import EditRefused
from dflash2_backport.transforms.registry import RegistryEntry

PENDING = """
_SPECULATIVE_DECODING_MODELS = {
    "EagleMiniCPMForCausalLM": ("minicpm_eagle", "EagleMiniCPMForCausalLM"),
    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
    "DSparkDraftModel": ("vllm.models.deepseek_v4", "DSparkDeepseekV4ForCausalLM"),
}
"""
APPLIED = """
_SPECULATIVE_DECODING_MODELS = {
    "EagleMiniCPMForCausalLM": ("minicpm_eagle", "EagleMiniCPMForCausalLM"),
    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),
    "DSparkDraftModel": ("vllm.models.deepseek_v4", "DSparkDeepseekV4ForCausalLM"),
}
"""

COSMETIC = {
    "anchor is the last entry, trailing comma": (
        """
        M = {
            "A": ("a", "A"),
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
        }
        """,
        """
        M = {
            "A": ("a", "A"),
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
            "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),
        }
        """,
    ),
    "anchor is the last entry, no trailing comma": (
        """
        M = {
            "A": ("a", "A"),
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")
        }
        """,
        """
        M = {
            "A": ("a", "A"),
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
            "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")
        }
        """,
    ),
    "single quotes are kept, a comment stays on its line": (
        """
        M = {
            'DFlashDraftModel': ('qwen3_dflash', 'DFlashQwen3ForCausalLM'),  # v1
            # next
            'B': ('b', 'B'),
        }
        """,
        """
        M = {
            'DFlashDraftModel': ('qwen3_dflash', 'DFlashQwen3ForCausalLM'),  # v1
            'DFlash2DraftModel': ('qwen3_dflash2', 'DFlash2Qwen3ForCausalLM'),
            # next
            'B': ('b', 'B'),
        }
        """,
    ),
    "a comment naming DFlash2DraftModel is not the entry": (
        """
        M = {
            # DFlash2DraftModel is not supported yet
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
        }
        """,
        """
        M = {
            # DFlash2DraftModel is not supported yet
            "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),
            "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),
        }
        """,
    ),
}

DRIFT = {
    "no DFlash1 entry to anchor on": 'M = {"A": ("a", "A")}\n',
    "DFlash1 maps elsewhere": 'M = {"DFlashDraftModel": ("other", "Other")}\n',
    "DFlash2DraftModel already maps elsewhere": (
        'M = {"DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n'
        '     "DFlash2DraftModel": ("my_dflash2", "Mine")}\n'
    ),
    "two tables with the anchor": (
        'A = {"DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")}\n'
        'B = {"DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")}\n'
    ),
}


class TestRegistryEntry(CodemodTest):
    TRANSFORM = RegistryEntry

    def test_pending_entry_is_inserted_after_the_dflash1_entry(self) -> None:
        self.assertCodemod(PENDING, APPLIED)

    def test_applied_entry_is_left_alone(self) -> None:
        self.assertCodemod(APPLIED, APPLIED)


@pytest.mark.parametrize("before,after", COSMETIC.values(), ids=COSMETIC.keys())
def test_cosmetic_variants_are_patched(before: str, after: str) -> None:
    case = TestRegistryEntry()
    case.assertCodemod(before, after)
    case.assertCodemod(after, after)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    with pytest.raises(EditRefused) as refused:
        TestRegistryEntry().assertCodemod(source, source)
    assert refused.value.edit == "registry"
