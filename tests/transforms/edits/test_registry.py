import pytest

from dflash2_backport.transforms.edits.registry.writer import RegistryEntry

from .._cases import assert_patched, refusal, revert_refusal

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
    "DFlash2DraftModel in another table": (
        'M = {"DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM")}\n'
        'N = {"DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")}\n'
    ),
    "DFlash2DraftModel twice": APPLIED.replace(
        '    "DSparkDraftModel"',
        '    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),\n'
        '    "DSparkDraftModel"',
    ),
}


PATCHED = {"inserted after the DFlash1 entry": (PENDING, APPLIED), **COSMETIC}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_table_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(RegistryEntry, before, after)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(RegistryEntry, source).edit == "registry"


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused_when_reverting_too(source: str) -> None:
    assert revert_refusal(RegistryEntry, source).edit == "registry"
