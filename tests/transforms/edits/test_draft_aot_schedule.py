"""FA3's ahead-of-time schedule turned off for a sliding-window draft's
attention groups (vLLM 0.30.0), as a table: 0.27.1's code (pending) and the
fix's (applied), the pieces the fix writes taken from its hunk files."""

import textwrap

import pytest

from dflash2_backport.transforms.edits.draft_aot_schedule.judge import AOT_OFF, IMPORT
from dflash2_backport.transforms.edits.draft_aot_schedule.judge import LOOP as LOOP_SOURCE
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_aot_schedule.writer import DraftAotSchedule

from .._cases import (
    assert_applied_and_reverted_exactly,
    assert_left_alone,
    assert_patched,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)

NAME = "draft-aot-schedule"
#: The speculator as 0.27.1 ships it; the call the fix's loop follows, from
#: the hunk's file.
PENDING = '''
import torch

from vllm.triton_utils import tl, triton
from vllm.v1.attention.backends.utils import PAD_SLOT_ID
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class DFlashSpeculator(DraftModelSpeculator):
    def load_model(self, target_model: nn.Module) -> nn.Module:
        return load_dflash_model(target_model, self.vllm_config)

    def set_attn(
        self,
        model_state: ModelState,
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        target_input_buffers: InputBuffers,
        target_attn_groups: list[list[AttentionGroup]],
    ) -> None:
{super_call}
        self.draft_kv_cache_group_ids = [
            gid for gid, g in enumerate(self.attn_groups) if g
        ]
        assert self.draft_kv_cache_group_ids, "No draft attention groups found."
'''.replace("{super_call}", textwrap.indent(AOT_OFF.before, " " * 8))
IMPORT_0271 = IMPORT.before
IMPORT_FIXED = IMPORT.after
SUPER_CALL_END = "            target_attn_groups,\n        )\n"
LOOP = textwrap.indent(LOOP_SOURCE, " " * 8)
APPLIED = swapped(PENDING, (IMPORT_0271, IMPORT_FIXED), (SUPER_CALL_END, SUPER_CALL_END + LOOP))
HUNKS = [IMPORT.name, AOT_OFF.name]
# The loop as vLLM 0.30.0 writes it, in its words and layout.
UPSTREAM_LOOP = """
        # FlashAttention's AOT split schedule is wrong for a windowed drafter,
        # and `_get_sliding_window_configs` leaves it on or off depending on
        # whether the target also runs FlashAttention. Decide it here instead.
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder()
                if getattr(
                    builder, "aot_schedule", False
                ) and get_kv_cache_spec_sliding_window(builder.kv_cache_spec):
                    # `aot_schedule` belongs to FlashAttention's builder, not
                    # to the base class this loop is typed against.
                    builder.aot_schedule = False  # type: ignore[attr-defined]
"""
OFF = "                    builder.aot_schedule = False  # type: ignore[attr-defined]\n"


def both(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


COSMETIC = {
    "the super call on one line": both(
        "        super().set_attn(\n            model_state,\n            kv_cache_config,\n"
        "            block_tables,\n            target_input_buffers,\n"
        "            target_attn_groups,\n        )\n",
        "        super().set_attn(model_state, kv_cache_config, block_tables, "
        "target_input_buffers, target_attn_groups)\n",
    ),
    "a comment above the super call stays with it": both(
        "        super().set_attn(\n",
        "        # The base class builds the groups.\n        super().set_attn(\n",
    ),
    "the imports around it regrouped": both(
        "from vllm.v1.attention.backends.utils import PAD_SLOT_ID\n",
        "from vllm.v1.attention.backends.utils import PAD_SLOT_ID  # noqa: F401\n\n",
    ),
}
# isort's force-single-line: 0.27.1's file as it leaves it, and the fix as it
# leaves the patched one, which is what the fix writes there.
ONE_A_LINE = ("from vllm.triton_utils import tl, triton\n",
              "from vllm.triton_utils import tl\nfrom vllm.triton_utils import triton\n")
COSMETIC["imports one name a line, the fix's too"] = (
    swap(PENDING, *ONE_A_LINE),
    swapped(
        APPLIED,
        ONE_A_LINE,
        (IMPORT_FIXED,
         IMPORT_0271 + "from vllm.v1.kv_cache_interface import get_kv_cache_spec_sliding_window\n"),
    ),
)
# The fix made otherwise: each row the file, and what reverting it writes.
ALREADY_APPLIED = {
    "0.30.0's loop, in its words": (swap(APPLIED, LOOP, UPSTREAM_LOOP), PENDING),
    "the name imported on a line of its own, which revert leaves": (
        swap(
            swap(APPLIED, IMPORT_FIXED, IMPORT_0271),
            "from vllm.v1.worker.gpu.block_table",
            "from vllm.v1.kv_cache_interface import get_kv_cache_spec_sliding_window\n"
            "from vllm.v1.worker.gpu.block_table",
        ),
        swap(
            PENDING,
            "from vllm.v1.worker.gpu.block_table",
            "from vllm.v1.kv_cache_interface import get_kv_cache_spec_sliding_window\n"
            "from vllm.v1.worker.gpu.block_table",
        ),
    ),
}
# Each row: the file, the hunk refused, and what the refusal says it found.
DRIFT = {
    "KVCacheConfig imported among other names": (
        swap(
            PENDING,
            "from vllm.v1.kv_cache_interface import KVCacheConfig\n",
            "from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec\n",
        ),
        IMPORT.name,
        "found 'from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec', "
        "which imports other names too",
    ),
    "the schedule left on": (
        swap(APPLIED, OFF, OFF.replace("= False", "= True")),
        AOT_OFF.name,
        "'builder.aot_schedule = True' on line 42, which the fix did not write",
    ),
    "the schedule off for full-attention groups too": (
        swap(
            APPLIED,
            ' and (\n                    get_kv_cache_spec_sliding_window(builder.kv_cache_spec)\n'
            "                )",
            "",
        ),
        AOT_OFF.name,
        "'builder.aot_schedule = False' on line 40, which the fix did not write",
    ),
    "the loop before the super call, where the base class undoes it": (
        swapped(
            PENDING,
            (IMPORT_0271, IMPORT_FIXED),
            ("        super().set_attn(\n", LOOP.lstrip("\n") + "        super().set_attn(\n"),
        ),
        AOT_OFF.name,
        "'builder.aot_schedule = False' on line 34, which the fix did not write",
    ),
    "the loop twice": (
        swap(APPLIED, SUPER_CALL_END + LOOP, SUPER_CALL_END + LOOP + LOOP),
        AOT_OFF.name,
        "'builder.aot_schedule = False' on line 53, which the fix did not write",
    ),
    "the schedule turned back on in another method": (
        APPLIED + "\n    def warm_up(self) -> None:\n        self.builder.aot_schedule = True\n",
        AOT_OFF.name,
        "'self.builder.aot_schedule = True' on line 50, which the fix did not write",
    ),
    "the schedule set through setattr": (
        swap(
            PENDING,
            SUPER_CALL_END,
            SUPER_CALL_END + '        setattr(self.builder, "aot_schedule", True)\n',
        ),
        AOT_OFF.name,
        "'setattr(self.builder, \"aot_schedule\", True)' on line 29",
    ),
    "the super call passes other arguments": (
        swap(PENDING, SUPER_CALL_END, "            [],\n        )\n"),
        AOT_OFF.name,
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "no super call": (
        swap(
            PENDING,
            "        super().set_attn(\n",
            "        DraftModelSpeculator.set_attn(\n            self,\n",
        ),
        AOT_OFF.name,
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "set_attn defined twice": (
        PENDING + "\n    def set_attn(self) -> None:\n        pass\n",
        AOT_OFF.name,
        "expected one method DFlashSpeculator.set_attn, found 2 of them",
    ),
    "the name imported from elsewhere": (
        swap(
            PENDING,
            "import torch\n",
            "import torch\nfrom windows import get_kv_cache_spec_sliding_window\n",
        ),
        IMPORT.name,
        "it bound to `windows.get_kv_cache_spec_sliding_window`",
    ),
    "KVCacheConfig imported twice": (
        swap(PENDING, IMPORT_0271, IMPORT_0271 + IMPORT_0271),
        IMPORT.name,
        "found 2 of them",
    ),
}


def test_the_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(DraftAotSchedule, PENDING)) == HUNKS


@pytest.mark.parametrize(
    "before,after", [(PENDING, APPLIED), *COSMETIC.values()], ids=["0.27.1", *COSMETIC]
)
def test_pending_code_is_patched_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(DraftAotSchedule, before, after)
    assert set(verdicts(DraftAotSchedule, before).values()) == {State.PENDING}
    assert set(verdicts(DraftAotSchedule, after).values()) == {State.APPLIED}


@pytest.mark.parametrize("source,back", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED)
def test_the_fix_written_otherwise_is_applied_and_reverts_exactly(source: str, back: str) -> None:
    assert_applied_and_reverted_exactly(DraftAotSchedule, source, back)


@pytest.mark.parametrize("source,hunk,found", DRIFT.values(), ids=DRIFT)
def test_code_that_is_neither_is_refused_naming_what_it_found(
    source: str, hunk: str, found: str
) -> None:
    refused = refusal(DraftAotSchedule, source)
    assert refused.edit == NAME
    (drifted,) = [h for h in refused.drifted if h.hunk == hunk]
    assert found in drifted.reason, drifted.reason


def test_the_import_other_code_reads_is_not_removed() -> None:
    source = APPLIED + (
        "\n    def windowed(self, spec) -> bool:\n"
        "        return get_kv_cache_spec_sliding_window(spec) is not None\n"
    )
    assert_left_alone(DraftAotSchedule, source)
    (drifted,) = revert_refusal(DraftAotSchedule, source).drifted
    assert drifted.hunk == IMPORT.name
    assert "`DFlashSpeculator.windowed`" in drifted.reason


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(DraftAotSchedule, crlf(PENDING)) == crlf(APPLIED)
    assert output(DraftAotSchedule, crlf(APPLIED), revert=True) == crlf(PENDING)
