import pytest

from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_conv_kernel.writer import DraftConvKernel

from ._cases import (
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
NEW_IMPORTS = """from vllm.triton_utils import tl, triton
from vllm.utils.torch_utils import direct_register_custom_op
"""
MIDDLE = """
from .utils import maybe_prefix

_SLIDING_ATTENTION = "sliding_attention"
"""

KERNEL = """

@triton.jit
def _dflash2_grouped_conv_kernel(
    x_ptr,  # [num_tokens, channels]
    delta_ptr,  # [num_tokens, taps, num_groups], any strides
    base_ptr,  # [taps, channels]
    out_ptr,  # [num_tokens, channels]
    x_row_stride,
    delta_row_stride,
    delta_tap_stride,
    base_tap_stride,
    out_row_stride,
    channels,
    block_size,
    GROUP_SIZE: tl.constexpr,
    TAPS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # 64-bit offsets: rows times channels may pass 2**31 in a large batch.
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_row = lanes < channels
    groups = lanes // GROUP_SIZE
    slot = row % block_size
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    for tap in tl.static_range(TAPS):
        # Tap t reads the row t slots earlier, and only within the same
        # draft block: never another request's rows.
        live = in_row & (slot >= tap)
        weight = tl.load(
            base_ptr + tap * base_tap_stride + lanes, mask=live, other=0.0
        ).to(tl.float32) + tl.load(
            delta_ptr + row * delta_row_stride + tap * delta_tap_stride + groups,
            mask=live,
            other=0.0,
        ).to(tl.float32)
        earlier = tl.load(
            x_ptr + (row - tap) * x_row_stride + lanes, mask=live, other=0.0
        ).to(tl.float32)
        total += weight * earlier
    tl.store(out_ptr + row * out_row_stride + lanes, total, mask=in_row)


def dflash2_grouped_conv(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    group_size: int,
) -> torch.Tensor:
    \"\"\"A DFlash2 draft's grouped convolution, in one kernel.

    Tap `t` of row `r` adds `(base[t] + delta[r, t]) * hidden_states[r - t]`
    while row `r - t` lies in the same draft block of `block_size` rows, each
    group of `group_size` channels sharing its `delta`; the sum is taken in
    float32 and rounded once to the input's dtype.
    \"\"\"
    # The kernel steps through rows by their strides and channels one by one.
    hidden_states, delta, base = (
        t if t.stride(-1) == 1 else t.contiguous() for t in (hidden_states, delta, base)
    )
    num_tokens, channels = hidden_states.shape
    output = torch.empty_like(hidden_states)
    if num_tokens == 0:
        return output
    # Below 128 rows (a few requests' draft blocks), half the channels a
    # program: twice the programs, so that a small step still fills the SMs.
    block_c = min(512 if num_tokens < 128 else 1024, triton.next_power_of_2(channels))
    _dflash2_grouped_conv_kernel[(num_tokens, triton.cdiv(channels, block_c))](
        hidden_states,
        delta,
        base,
        output,
        hidden_states.stride(0),
        delta.stride(0),
        delta.stride(1),
        base.stride(0),
        output.stride(0),
        channels,
        block_size,
        GROUP_SIZE=group_size,
        TAPS=base.shape[0],
        BLOCK_C=block_c,
        num_warps=4,
    )
    return output


def _dflash2_grouped_conv_shape(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    group_size: int,
) -> torch.Tensor:
    return torch.empty_like(hidden_states)


direct_register_custom_op(
    op_name="dflash2_grouped_conv",
    op_func=dflash2_grouped_conv,
    fake_impl=_dflash2_grouped_conv_shape,
    tags=(torch.Tag.needs_fixed_stride_order,),
)
"""

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
