import pytest

from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_conv_kernel.judge import IMPORTS_HUNK, KERNEL_HUNK
from dflash2_backport.transforms.edits.draft_conv_kernel.writer import DraftConvKernel

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)

IMPORTS_0271 = """
import torch
from transformers import Qwen3Config

from vllm.config import CacheConfig, VllmConfig
from vllm.transformers_utils.repo_utils import get_hf_file_bytes
"""
LATER_IMPORT = """from vllm.v1.attention.backend import AttentionType
"""
#: The import lines and the kernel as the edit writes them, from its hunk files.
NEW_IMPORTS = IMPORTS_HUNK.after
MIDDLE = """
from .utils import maybe_prefix

_SLIDING_ATTENTION = "sliding_attention"
"""

#: The kernel, two blank lines from what precedes it.
KERNEL = "\n\n" + KERNEL_HUNK.after

ANCHOR = """

def _get_dflash_fc_input_size(vllm_config: VllmConfig) -> int:
    config = vllm_config.speculative_config.draft_model_config.hf_config
    return config.hidden_size * config.num_hidden_layers
"""

PENDING = IMPORTS_0271 + LATER_IMPORT + MIDDLE + ANCHOR
APPLIED = IMPORTS_0271 + NEW_IMPORTS + LATER_IMPORT + MIDDLE + KERNEL + ANCHOR
HUNKS = ("imports", "grouped conv kernel")

# vLLM 0.26.0: no `_get_dflash_fc_input_size`; the model computes the fc
# layer's width in its __init__, and `_resolve_layer_attention` follows.
INLINE = """

def _resolve_layer_attention(config: Qwen3Config, index: int) -> str:
    return _SLIDING_ATTENTION


class DFlashQwen3Model(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        fc_input_size = config.hidden_size * config.num_hidden_layers
"""

PATCHED = {
    "0.27.1: imports before the first vllm module after vllm.utils.torch_utils": (
        PENDING, APPLIED,
    ),
    "no vllm import sorts after them: right after the last": (
        IMPORTS_0271 + MIDDLE + ANCHOR,
        IMPORTS_0271 + NEW_IMPORTS + MIDDLE + KERNEL + ANCHOR,
    ),
    "one name a line: so are the new imports": (
        swap(PENDING, "from vllm.config import CacheConfig, VllmConfig\n",
             "from vllm.config import CacheConfig\nfrom vllm.config import VllmConfig\n"),
        swapped(
            APPLIED,
            ("from vllm.config import CacheConfig, VllmConfig\n",
             "from vllm.config import CacheConfig\nfrom vllm.config import VllmConfig\n"),
            (NEW_IMPORTS,
             "from vllm.triton_utils import tl\nfrom vllm.triton_utils import triton\n"
             "from vllm.utils.torch_utils import direct_register_custom_op\n"),
        ),
    ),
    "0.26.0, the width computed inline: before _resolve_layer_attention": (
        IMPORTS_0271 + LATER_IMPORT + MIDDLE + INLINE,
        IMPORTS_0271 + NEW_IMPORTS + LATER_IMPORT + MIDDLE + KERNEL + INLINE,
    ),
}

ALREADY_APPLIED = {
    "names imported in another order and grouping": swap(
        APPLIED, NEW_IMPORTS,
        "from vllm.triton_utils import triton, tl  # the kernel's\n"
        "from vllm.utils.torch_utils import (\n    direct_register_custom_op,\n)\n",
    ),
    "reformatted, commented, statements in another order": swapped(
        APPLIED,
        ("    slot = row % block_size\n", "    slot = row % block_size  # within its block\n"),
        ('    op_name="dflash2_grouped_conv",\n', "    op_name='dflash2_grouped_conv',\n"),
        ("    block_c = min(512 if num_tokens < 128 else 1024, triton.next_power_of_2(channels))\n",
         "    block_c = min(\n        512 if num_tokens < 128 else 1024,\n"
         "        triton.next_power_of_2(channels),\n    )\n"),
    ),
    "the launcher as earlier versions wrote it: 1,024 channels at any row count": swap(
        APPLIED,
        "    block_c = min(512 if num_tokens < 128 else 1024, triton.next_power_of_2(channels))\n",
        "    block_c = min(1024, triton.next_power_of_2(channels))\n",
    ),
}

DRIFT = {
    "the kernel reads across draft blocks": swap(
        APPLIED, "live = in_row & (slot >= tap)", "live = in_row"
    ),
    "the sum rounded at every tap": swap(
        APPLIED, "total = tl.zeros([BLOCK_C], dtype=tl.float32)",
        "total = tl.zeros([BLOCK_C], dtype=tl.bfloat16)",
    ),
    "512 channels a program at any row count": swap(
        APPLIED, "min(512 if num_tokens < 128 else 1024,", "min(512,"
    ),
    "registered under another function": swap(
        APPLIED, "op_func=dflash2_grouped_conv,", "op_func=_dflash2_grouped_conv_shape,"
    ),
    "the launcher without its registration": swap(
        APPLIED,
        """direct_register_custom_op(
    op_name="dflash2_grouped_conv",
    op_func=dflash2_grouped_conv,
    fake_impl=_dflash2_grouped_conv_shape,
    tags=(torch.Tag.needs_fixed_stride_order,),
)
""",
        "",
    ),
    "triton bound to something else": swap(
        PENDING, "import torch\n", "import torch\nimport triton\n"
    ),
    "_get_dflash_fc_input_size renamed": swap(
        PENDING, "def _get_dflash_fc_input_size(", "def _fc_input_size("
    ),
    "torch not imported at module level": swap(PENDING, "import torch\n", ""),
    "no vllm import to put the imports among": swapped(
        PENDING,
        ("from vllm.config import CacheConfig, VllmConfig\n", ""),
        ("from vllm.transformers_utils.repo_utils import get_hf_file_bytes\n", ""),
        (LATER_IMPORT, ""),
    ),
}

REVERT_REFUSED = {
    "the launcher called by another function": (
        APPLIED + "\n\ndef conv(x, d, b):\n    return dflash2_grouped_conv(x, d, b, 8, 32)\n",
        ("grouped conv kernel", "`conv`"),
    ),
    "triton read by another kernel": (
        APPLIED + "\n\n@triton.jit\ndef other(x_ptr):\n    pass\n",
        ("imports", "`other`"),
    ),
}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_file_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(DraftConvKernel, before, after)
    assert set(verdicts(DraftConvKernel, after).values()) == {State.APPLIED}


def test_0271_is_pending_in_both_hunks() -> None:
    assert verdicts(DraftConvKernel, PENDING) == dict.fromkeys(HUNKS, State.PENDING)


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED.keys())
def test_the_kernel_written_any_way_counts_as_applied(source: str) -> None:
    assert_left_alone(DraftConvKernel, source)
    assert verdicts(DraftConvKernel, source) == dict.fromkeys(HUNKS, State.APPLIED)


@pytest.mark.parametrize("key", [
    "reformatted, commented, statements in another order",
    "the launcher as earlier versions wrote it: 1,024 channels at any row count",
])
def test_a_kernel_written_otherwise_is_reverted_by_meaning(key: str) -> None:
    assert_reverted_exactly(DraftConvKernel, ALREADY_APPLIED[key], PENDING)


def test_with_one_import_line_there_already_only_the_other_is_added() -> None:
    before = swap(PENDING, LATER_IMPORT, "from vllm.triton_utils import tl, triton\n" + LATER_IMPORT)
    assert output(DraftConvKernel, before) == APPLIED


def test_an_import_with_other_names_stays_when_the_kernel_goes() -> None:
    source = swap(
        APPLIED, "from vllm.triton_utils import tl, triton\n",
        "from vllm.triton_utils import HAS_TRITON, tl, triton\n",
    )
    assert verdicts(DraftConvKernel, source) == dict.fromkeys(HUNKS, State.APPLIED)
    assert output(DraftConvKernel, source, revert=True) == swap(
        PENDING, LATER_IMPORT, "from vllm.triton_utils import HAS_TRITON, tl, triton\n" + LATER_IMPORT
    )


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(DraftConvKernel, source).edit == "draft-conv-kernel"


@pytest.mark.parametrize("source,expected", REVERT_REFUSED.values(), ids=REVERT_REFUSED)
def test_what_other_code_reads_is_not_removed(source: str, expected: tuple[str, str]) -> None:
    (drifted,) = revert_refusal(DraftConvKernel, source).drifted
    assert (drifted.hunk, expected[1] in drifted.reason) == (expected[0], True)


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(DraftConvKernel, crlf(PENDING)) == crlf(APPLIED)
    assert output(DraftConvKernel, crlf(APPLIED), revert=True) == crlf(PENDING)
