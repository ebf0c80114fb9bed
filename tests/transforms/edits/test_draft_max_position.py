"""The draft's max_position_embeddings raise and the max_model_len cap, as
tables: 0.27.1's code (pending) written by hand, and the backport's (applied)
from its hunk files where it stands whole, each way round."""

import textwrap

import pytest

from dflash2_backport.transforms.edits.draft_max_position.judge import (
    ARMS_HUNK,
    GUARD_HUNK,
    LIMIT_CALL_HUNK,
    LIMIT_HUNK,
    ROPE_HUNK,
    SHARES_HUNK,
)
from dflash2_backport.transforms.edits.draft_max_position.judge import (
    HELPER_0260 as HELPER_0260_SOURCE,
)
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_max_position.writer import (
    DraftPositions,
    MaxModelLenCap,
)

from .._cases import (
    assert_applied_and_reverted_exactly,
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    case,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)

# -- config/speculative.py --------------------------------------------------------

HEADER = """
from typing import TYPE_CHECKING, Any, Literal

from vllm.logger import init_logger

if TYPE_CHECKING:
    from transformers import PretrainedConfig
else:
    PretrainedConfig = Any

logger = init_logger(__name__)

DraftSampleMethod = Literal["greedy", "probabilistic"]
"""
ROPE = "\n\n" + ROPE_HUNK.after

CLASS = '''

@config
class SpeculativeConfig:
    """Configuration for speculative decoding."""

    method: str | None = None

    def __post_init__(self):
        if self.model is not None:
            if self.draft_model_config is not None:
                if self.method in ("eagle", "eagle3"):
                    # EAGLE drafts share the target's positional space; a
                    # draft checkpoint with a smaller max_position_embeddings
                    # than the target under-sizes its rotary cache (#48894).
                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
                        self.draft_model_config.hf_config,
                        self.target_model_config.max_model_len,
                    )

                # Replace hf_config for EAGLE draft_model
                if self.method in ("eagle", "eagle3", "dflash"):
                    self.update_arch_()

    @staticmethod
    def _maybe_override_draft_max_position_embeddings(
        draft_hf_config: PretrainedConfig,
        target_max_model_len: int,
    ) -> None:
        """Raise an EAGLE draft's max_position_embeddings up to the target's."""
        draft_max_position_embeddings = getattr(
            draft_hf_config, "max_position_embeddings", None
        )
        if (
            draft_max_position_embeddings is None
            or draft_max_position_embeddings >= target_max_model_len
        ):
            return
        logger.info(
            "Overriding draft model max_position_embeddings from %d to the "
            "target model's max_model_len (%d); EAGLE drafts share the "
            "target's positional space.",
            draft_max_position_embeddings,
            target_max_model_len,
        )
        draft_hf_config.max_position_embeddings = target_max_model_len

    def use_eagle(self) -> bool:
        return self.method in ("eagle", "eagle3", "mtp", "dflash", "dspark")

    def use_dflash(self) -> bool:
        return self.method == "dflash"
'''
# The backport's pieces, each as it reads in the file.
EAGLE_CALL = """\
                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
                        self.draft_model_config.hf_config,
                        self.target_model_config.max_model_len,
                    )
"""
ARMS = """\
                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
                        self.draft_model_config.hf_config,
                        self.target_model_config.max_model_len,
                        any_rope_type=True,
                    )

                if self.method == "dflash":
                    # A DFlash draft shares the target's positions too (#57941). As in
                    # 0.33.0, it is raised only where its RoPE types just size the cache;
                    # VllmConfig caps max_model_len otherwise. EAGLE keeps 0.27.1's raise.
                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
                        self.draft_model_config.hf_config,
                        self.target_model_config.max_model_len,
                    )
"""
SIGNATURE = """\
        draft_hf_config: PretrainedConfig,
        target_max_model_len: int,
    ) -> None:
"""
SIGNATURE_AFTER = """\
        draft_hf_config: PretrainedConfig,
        target_max_model_len: int,
        any_rope_type: bool = False,
    ) -> None:
"""
EARLY_RETURN = """\
            or draft_max_position_embeddings >= target_max_model_len
        ):
            return
"""
GUARDED = """\
            or draft_max_position_embeddings >= target_max_model_len
        ):
            return
        if not any_rope_type and not _rope_only_sizes_cache(draft_hf_config):
            # The draft's RoPE reads max_position_embeddings for more than the size
            # of its cache, so raising it would change the draft; VllmConfig limits
            # max_model_len to the draft's instead.
            return
"""
SHARES = (
    textwrap.indent(SHARES_HUNK.after, "    ") + "\n    def use_dflash(self) -> bool:\n"
)

PENDING = HEADER + CLASS
APPLIED = HEADER + ROPE + swapped(
    CLASS,
    (EAGLE_CALL, ARMS),
    (SIGNATURE, SIGNATURE_AFTER),
    (EARLY_RETURN, GUARDED),
    ("    def use_dflash(self) -> bool:\n", SHARES),
)
HUNKS = [h.name for h in (ROPE_HUNK, GUARD_HUNK, ARMS_HUNK, SHARES_HUNK)]


def both(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


SPLIT_SIGNATURE = (
    "    def _maybe_override_draft_max_position_embeddings(\n"
    "        draft_hf_config: PretrainedConfig,\n"
    "        target_max_model_len: int,\n"
    "    ) -> None:\n"
)
SPLIT_CALL = (
    "                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(\n"
    "                        self.draft_model_config.hf_config,\n"
    "                        self.target_model_config.max_model_len,\n"
    "                    )\n"
    "\n"
    "                # Replace"
)

COSMETIC = {
    "signature on one line": (
        swap(
            PENDING,
            SPLIT_SIGNATURE,
            "    def _maybe_override_draft_max_position_embeddings("
            "draft_hf_config: PretrainedConfig, target_max_model_len: int) -> None:\n",
        ),
        swap(
            swap(APPLIED, SIGNATURE_AFTER, ""),
            "    def _maybe_override_draft_max_position_embeddings(\n",
            "    def _maybe_override_draft_max_position_embeddings("
            "draft_hf_config: PretrainedConfig, target_max_model_len: int, "
            "any_rope_type: bool = False) -> None:\n",
        ),
    ),
    "EAGLE call on one line, single quotes, no comment": (
        swapped(
            PENDING,
            (SPLIT_CALL,
             "                    SpeculativeConfig._maybe_override_draft_max_position_embeddings("
             "self.draft_model_config.hf_config, self.target_model_config.max_model_len)\n"
             "\n                # Replace"),
            ('                if self.method in ("eagle", "eagle3"):',
             "                if self.method in ('eagle', 'eagle3'):"),
            ("                    # EAGLE drafts share the target's positional space; a\n"
             "                    # draft checkpoint with a smaller max_position_embeddings\n"
             "                    # than the target under-sizes its rotary cache (#48894).\n", ""),
        ),
        swapped(
            APPLIED,
            ("                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(\n"
             "                        self.draft_model_config.hf_config,\n"
             "                        self.target_model_config.max_model_len,\n"
             "                        any_rope_type=True,\n"
             "                    )\n",
             "                    SpeculativeConfig._maybe_override_draft_max_position_embeddings("
             "self.draft_model_config.hf_config, self.target_model_config.max_model_len, "
             "any_rope_type=True)\n"),
            ('                if self.method in ("eagle", "eagle3"):',
             "                if self.method in ('eagle', 'eagle3'):"),
            ("                    # EAGLE drafts share the target's positional space; a\n"
             "                    # draft checkpoint with a smaller max_position_embeddings\n"
             "                    # than the target under-sizes its rotary cache (#48894).\n", ""),
        ),
    ),
    "a comment on the early return": (
        swap(
            PENDING,
            EARLY_RETURN,
            "            or draft_max_position_embeddings >= target_max_model_len\n"
            "        ):\n"
            "            return  # nothing to raise\n",
        ),
        swap(
            APPLIED,
            "        ):\n            return\n        if not any_rope_type",
            "        ):\n            return  # nothing to raise\n        if not any_rope_type",
        ),
    ),
    "a class attribute after use_dflash": both(
        "    def use_dflash(self) -> bool:\n        return self.method == \"dflash\"\n",
        "    def use_dflash(self) -> bool:\n        return self.method == \"dflash\"\n\n"
        "    enforce_eager: bool | None = None\n",
    ),
}

ALREADY_APPLIED = {
    "the RoPE helpers after the class, reworded comments": (
        HEADER
        + swapped(
            CLASS,
            (EAGLE_CALL, swap(ARMS, "# A DFlash draft shares", "# DFlash drafts share")),
            (SIGNATURE, SIGNATURE_AFTER),
            (EARLY_RETURN, swap(GUARDED, "# The draft's RoPE reads", "# RoPE reads")),
            ("    def use_dflash(self) -> bool:\n", SHARES),
        )
        + swap(ROPE, "# RoPE types whose get_rope", "# Types whose get_rope")
    ),
}

SEMANTIC = {
    # The guard's callers rely on the helper to raise the draft's positions.
    "the helper caps what it raises": swap(
        PENDING,
        "        draft_hf_config.max_position_embeddings = target_max_model_len\n",
        "        draft_hf_config.max_position_embeddings = min(target_max_model_len, 32768)\n",
    ),
    "the helper no longer a staticmethod": swap(
        PENDING,
        "    @staticmethod\n    def _maybe_override_draft_max_position_embeddings(",
        "    @classmethod\n    def _maybe_override_draft_max_position_embeddings(",
    ),
    "the EAGLE arm tests only eagle": swap(
        PENDING, 'if self.method in ("eagle", "eagle3"):', 'if self.method == "eagle":'
    ),
    "0.33.0's arm for every method but draft_model": swap(
        PENDING,
        'if self.method in ("eagle", "eagle3"):',
        'if self.method != "draft_model":',
    ),
    "the EAGLE arm passes other arguments": swap(
        PENDING,
        "                        self.target_model_config.max_model_len,\n                    )\n\n"
        "                # Replace",
        "                        self.max_model_len,\n                    )\n\n                # Replace",
    ),
    "the helper has another parameter": swap(
        PENDING, "        target_max_model_len: int,\n    ) -> None:",
        "        target_max_model_len: int,\n        strict: bool = True,\n    ) -> None:",
    ),
    "the helper's early return is gone": swap(
        PENDING,
        "        if (\n            draft_max_position_embeddings is None\n"
        "            or draft_max_position_embeddings >= target_max_model_len\n"
        "        ):\n            return\n",
        "",
    ),
    "no use_dflash to put draft_shares_target_positions before": swap(
        PENDING, "def use_dflash(self)", "def uses_dflash(self)"
    ),
    "a guard that skips every RoPE": swap(
        APPLIED,
        "if not any_rope_type and not _rope_only_sizes_cache(draft_hf_config):",
        "if not any_rope_type:",
    ),
    "the parameter defaults to raising any RoPE": swap(
        APPLIED, "any_rope_type: bool = False,", "any_rope_type: bool = True,"
    ),
    "yarn counted as cache-only": swap(
        APPLIED, '{"default", "linear", "llama3", "ntk", "proportional"}',
        '{"default", "linear", "llama3", "ntk", "proportional", "yarn"}',
    ),
    "_rope_only_sizes_cache without the nested case": swap(
        APPLIED,
        "    if is_rope_parameters_nested(rope_parameters):\n"
        "        every = [p for p in rope_parameters.values() if isinstance(p, dict) and p]\n"
        "    else:\n"
        "        every = [rope_parameters] if rope_parameters else []\n",
        "    every = [rope_parameters] if rope_parameters else []\n",
    ),
    "the constant without the function": swap(
        APPLIED, "def _rope_only_sizes_cache(", "def _rope_only_sizes_the_cache("
    ),
    "the DFlash arm without the EAGLE argument": swap(
        APPLIED,
        "                        self.target_model_config.max_model_len,\n"
        "                        any_rope_type=True,\n",
        "                        self.target_model_config.max_model_len,\n",
    ),
    "the EAGLE argument without the DFlash arm": swap(
        APPLIED,
        ARMS[ARMS.index("\n                if self.method == \"dflash\":"):],
        "\n",
    ),
    "the DFlash arm raises whatever the RoPE": swap(
        APPLIED,
        "                        self.target_model_config.max_model_len,\n"
        "                    )\n\n                # Replace",
        "                        self.target_model_config.max_model_len,\n"
        "                        any_rope_type=True,\n"
        "                    )\n\n                # Replace",
    ),
    "the parameter without the guard": swap(
        APPLIED,
        GUARDED,
        EARLY_RETURN,
    ),
    "draft_shares_target_positions says so for every method": swap(
        APPLIED,
        '        if self.method in ("eagle", "eagle3"):\n            return True\n'
        '        return self.method == "dflash" and',
        "        return",
    ),
}


def test_the_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(DraftPositions, PENDING)) == HUNKS


@pytest.mark.parametrize(
    "before,after",
    [(PENDING, APPLIED), *COSMETIC.values()],
    ids=["0.27.1", *COSMETIC],
)
def test_pending_code_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(DraftPositions, before, after)
    assert set(verdicts(DraftPositions, before).values()) == {State.PENDING}
    assert set(verdicts(DraftPositions, after).values()) == {State.APPLIED}


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED)
def test_the_fix_written_another_way_counts_as_applied_and_reverts_by_meaning(
    source: str,
) -> None:
    assert_applied_and_reverted_exactly(DraftPositions, source, PENDING)


@pytest.mark.parametrize("source", SEMANTIC.values(), ids=SEMANTIC)
def test_semantic_variants_are_refused(source: str) -> None:
    refused = refusal(DraftPositions, source)
    assert refused.edit == "draft-max-position"
    assert all(h.reason.startswith("expected ") for h in refused.drifted)


def test_a_refusal_names_what_it_found() -> None:
    (drifted,) = refusal(DraftPositions, SEMANTIC["the EAGLE arm tests only eagle"]).drifted
    assert drifted.hunk == ARMS_HUNK.name
    assert "none" in drifted.reason
    (drifted,) = refusal(DraftPositions, SEMANTIC["the parameter without the guard"]).drifted
    assert drifted.hunk == GUARD_HUNK.name
    assert "the parameter without the guard" in drifted.reason


def test_the_rope_helpers_other_code_reads_are_not_removed() -> None:
    source = APPLIED + (
        "\n\ndef rope_is_plain(config):\n    return _rope_only_sizes_cache(config)\n"
    )
    assert_left_alone(DraftPositions, source)
    (drifted,) = revert_refusal(DraftPositions, source).drifted
    assert drifted.hunk == ROPE_HUNK.name
    assert "`rope_is_plain`" in drifted.reason


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(DraftPositions, crlf(PENDING)) == crlf(APPLIED)
    assert output(DraftPositions, crlf(APPLIED), revert=True) == crlf(PENDING)


# -- config/speculative.py as vLLM 0.26.0 has it: no helper, no EAGLE arm -------

CLASS_0260 = '''

@config
class SpeculativeConfig:
    """Configuration for speculative decoding."""

    method: str | None = None

    def __post_init__(self):
        if self.model is not None:
            if self.draft_model_config is not None:
                if self.method == "medusa":
                    pass

                # Replace hf_config for EAGLE draft_model
                if self.method in ("eagle", "eagle3", "dflash"):
                    self.update_arch_()

    @staticmethod
    def _maybe_override_draft_max_model_len(
        draft_max_model_len: int,
        target_max_model_len: int,
    ) -> int:
        return min(draft_max_model_len, target_max_model_len)

    @staticmethod
    def _verify_and_get_draft_tp(
        target_parallel_config: ParallelConfig,
    ) -> int:
        return 1

    def use_dflash(self) -> bool:
        return self.method == "dflash"
'''
ARM_0260 = """\
                if self.method == "dflash":
                    # A DFlash draft shares the target's positions (#57941). As in
                    # 0.33.0, it is raised only where its RoPE types just size the cache;
                    # VllmConfig caps max_model_len otherwise.
                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(
                        self.draft_model_config.hf_config,
                        self.target_model_config.max_model_len,
                    )

"""
HELPER_0260 = textwrap.indent(HELPER_0260_SOURCE, "    ") + "\n"

WRAP = "                # Replace hf_config for EAGLE draft_model\n"
TP = "    @staticmethod\n    def _verify_and_get_draft_tp("
PENDING_0260 = HEADER + CLASS_0260
APPLIED_0260 = HEADER + ROPE + swapped(
    CLASS_0260,
    (WRAP, ARM_0260 + WRAP),
    (TP, HELPER_0260 + TP),
    ("    def use_dflash(self) -> bool:\n", SHARES),
)
#: One half of 0.26.0's form applied, the other not: apply completes it.
HALF_APPLIED_0260 = {
    "the helper without the arm": swap(APPLIED_0260, ARM_0260, ""),
    "the arm without the helper": swap(APPLIED_0260, HELPER_0260, ""),
}
SEMANTIC_0260 = {
    "the 0.26.0 helper beside an EAGLE arm": swap(
        swap(APPLIED_0260, ARM_0260, ""),
        WRAP,
        '                if self.method in ("eagle", "eagle3"):\n'
        "                    SpeculativeConfig._maybe_override_draft_max_position_embeddings(\n"
        "                        self.draft_model_config.hf_config,\n"
        "                        self.target_model_config.max_model_len,\n"
        "                    )\n\n" + WRAP,
    ),
    "the DFlash arm after the wrap, on an EAGLEConfig": swapped(
        APPLIED_0260,
        (ARM_0260, ""),
        ("                    self.update_arch_()\n",
         "                    self.update_arch_()\n\n" + ARM_0260.rstrip("\n") + "\n"),
    ),
    "the 0.26.0 helper raises whatever the RoPE": swap(
        APPLIED_0260,
        "        if not _rope_only_sizes_cache(draft_hf_config):\n"
        "            # The draft's RoPE reads max_position_embeddings for more than the size\n"
        "            # of its cache, so raising it would change the draft; VllmConfig limits\n"
        "            # max_model_len to the draft's instead.\n"
        "            return\n",
        "",
    ),
    "no wrap of the draft's hf_config": swap(
        PENDING_0260, 'if self.method in ("eagle", "eagle3", "dflash"):', 'if self.method == "eagle":'
    ),
    "no _verify_and_get_draft_tp to put the helper before": swap(
        PENDING_0260, "def _verify_and_get_draft_tp(", "def _draft_tp("
    ),
}


def test_0_26_0_without_helper_or_eagle_arm_gets_the_whole_helper_and_the_dflash_arm() -> None:
    assert_patched(DraftPositions, PENDING_0260, APPLIED_0260)
    assert set(verdicts(DraftPositions, PENDING_0260).values()) == {State.PENDING}
    assert set(verdicts(DraftPositions, APPLIED_0260).values()) == {State.APPLIED}


def test_0_26_0_patched_is_reverted_byte_for_byte_in_crlf_too() -> None:
    assert output(DraftPositions, crlf(PENDING_0260)) == crlf(APPLIED_0260)
    assert output(DraftPositions, crlf(APPLIED_0260), revert=True) == crlf(PENDING_0260)


@pytest.mark.parametrize("source", HALF_APPLIED_0260.values(), ids=HALF_APPLIED_0260)
def test_0_26_0_half_applied_is_completed_and_reverted_whole(source: str) -> None:
    case(DraftPositions).assertCodemod(source, APPLIED_0260)
    assert_reverted_exactly(DraftPositions, source, PENDING_0260)


def test_0_26_0_helper_and_arm_written_another_way_count_as_applied() -> None:
    reworded = swapped(
        APPLIED_0260,
        ('                if self.method == "dflash":', "                if self.method == 'dflash':"),
        ("        vLLM 0.33.0's helper; in this release only DFlash drafts call it.\n", ""),
        ("            # max_model_len to the draft's instead.\n", ""),
    )
    assert_applied_and_reverted_exactly(DraftPositions, reworded, PENDING_0260)


@pytest.mark.parametrize("source", SEMANTIC_0260.values(), ids=SEMANTIC_0260)
def test_semantic_variants_of_0_26_0_are_refused(source: str) -> None:
    refused = refusal(DraftPositions, source)
    assert refused.edit == "draft-max-position"
    assert {h.hunk for h in refused.drifted} <= {GUARD_HUNK.name, ARMS_HUNK.name}


def test_the_rope_helpers_the_0_26_0_helper_reads_go_with_it() -> None:
    source = APPLIED_0260.replace(HELPER_0260, "")
    assert set(verdicts(DraftPositions, source, revert=True).values()) >= {State.APPLIED}
    kept = source + "\n\ndef rope_is_plain(config):\n    return _rope_only_sizes_cache(config)\n"
    (drifted,) = revert_refusal(DraftPositions, kept).drifted
    assert drifted.hunk == ROPE_HUNK.name


# -- config/vllm.py -----------------------------------------------------------------

CONFIG_PENDING = '''
import vllm.envs as envs
from vllm.logger import init_logger

logger = init_logger(__name__)


@config
class VllmConfig:
    """Dataclass which contains all vllm-related configuration."""

    def __post_init__(self):
        """Verify configs are valid & consistent with each other."""

        self.try_verify_and_update_config()

        if self.model_config is not None:
            self.model_config.verify_with_parallel_config(self.parallel_config)

            self.parallel_config.is_moe_model = self.model_config.is_moe

        if (
            self.model_config is not None
            and self.model_config.enable_return_routed_experts
        ):
            pass

    def __str__(self):
        return "VllmConfig"

    def _get_v2_model_runner_unsupported_features(self) -> list[str]:
        """Collect features not yet supported by the V2 model runner."""
        return []
'''
LIMIT = textwrap.indent(LIMIT_HUNK.after, "    ") + "\n"

CONFIG_APPLIED = swapped(
    CONFIG_PENDING,
    (
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n",
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n\n"
        "        self._limit_max_model_len_to_draft()\n",
    ),
    (
        "    def _get_v2_model_runner_unsupported_features(",
        LIMIT + "    def _get_v2_model_runner_unsupported_features(",
    ),
)
CONFIG_HUNKS = [LIMIT_HUNK.name, LIMIT_CALL_HUNK.name]

CONFIG_SEMANTIC = {
    "the model-config block no longer sets is_moe_model": swap(
        CONFIG_PENDING,
        "\n            self.parallel_config.is_moe_model = self.model_config.is_moe\n",
        "",
    ),
    "the call before the block": swap(
        CONFIG_APPLIED,
        "        self.try_verify_and_update_config()\n",
        "        self.try_verify_and_update_config()\n        self._limit_max_model_len_to_draft()\n",
    ),
    "the cap for every method": swap(
        CONFIG_APPLIED, '            or spec_config.method != "dflash"\n', ""
    ),
    "no logger to warn with": swap(
        CONFIG_PENDING, "logger = init_logger(__name__)\n", ""
    ),
    "the call nested in the block": swap(
        CONFIG_PENDING,
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n",
        "            self.parallel_config.is_moe_model = self.model_config.is_moe\n"
        "            self._limit_max_model_len_to_draft()\n",
    ),
}


def test_the_cap_is_patched_then_left_alone_each_way() -> None:
    assert_patched(MaxModelLenCap, CONFIG_PENDING, CONFIG_APPLIED)
    assert list(verdicts(MaxModelLenCap, CONFIG_PENDING)) == CONFIG_HUNKS
    assert set(verdicts(MaxModelLenCap, CONFIG_APPLIED).values()) == {State.APPLIED}


@pytest.mark.parametrize("source", CONFIG_SEMANTIC.values(), ids=CONFIG_SEMANTIC)
def test_semantic_variants_of_the_cap_are_refused(source: str) -> None:
    assert refusal(MaxModelLenCap, source).edit == "draft-max-position"


def test_the_cap_call_written_with_a_comment_is_reverted_with_it() -> None:
    commented = swap(
        CONFIG_APPLIED,
        "\n        self._limit_max_model_len_to_draft()\n",
        "\n        # V2 serves no longer sequence than the draft's.\n"
        "        self._limit_max_model_len_to_draft()\n",
    )
    assert set(verdicts(MaxModelLenCap, commented).values()) == {State.APPLIED}
    assert_reverted_exactly(MaxModelLenCap, commented, CONFIG_PENDING)
