import textwrap

import pytest
from dflash2_backport.transforms.edits.draft_logit_cache.judge import BUFFER, DRAFT_LOGIT_CACHE, HUNKS
from dflash2_backport.transforms.framework.hunk_files import class_body
from dflash2_backport.transforms.framework.meaning import same_meaning
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.draft_logit_cache.writer import DraftLogitCache

from dflash2_backport.transforms.framework.vocabulary import Direction

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted,
    case,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)

BUFFER_HUNK, HOOK_HUNK = (h.name for h in DRAFT_LOGIT_CACHE.hunks)

INIT = """
class BaseSpeculator(ABC):
    pass


class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.vocab_size = self.draft_model_config.get_vocab_size()

        self.draft_logits: torch.Tensor | None = None
        if self.speculative_config.draft_sample_method == "probabilistic":
"""
ZEROS_ALLOCATION = textwrap.indent(BUFFER.before.lstrip("\n"), " " * 12)
FULL_ALLOCATION = textwrap.indent(BUFFER.after, " " * 12)
OTHER_METHOD = """
    def _build_draft_attn_metadata(self) -> None:
        return None
"""
#: The hook as it lands in its class: its hunk file's class body.
HOOK = "\n" + class_body(HUNKS.patched("draft_logits_spec default"))
ANCHOR_METHOD = """
    def _validate_local_argmax_reduction(self) -> None:
        if not self.use_local_argmax_reduction:
            return
"""
PENDING = INIT + ZEROS_ALLOCATION + OTHER_METHOD + ANCHOR_METHOD
APPLIED = INIT + FULL_ALLOCATION + OTHER_METHOD + HOOK + ANCHOR_METHOD

ONE_LINE = """
        class DraftModelSpeculator(BaseSpeculator):
            def __init__(self, vllm_config, device):
                if self.speculative_config.draft_sample_method == 'probabilistic':
                    # Temperature-applied logits of the last draft.
                    self.draft_logits = torch.zeros(self.max_num_reqs, self.num_speculative_steps, self.vocab_size, dtype=torch.float32, device=device)  # fp32
                else:
                    self.other = None

            def _validate_local_argmax_reduction(self) -> None:
                return
        """
ONE_LINE_APPLIED = '''
        class DraftModelSpeculator(BaseSpeculator):
            def __init__(self, vllm_config, device):
                if self.speculative_config.draft_sample_method == 'probabilistic':
                    # Temperature-applied logits of the last draft.
                    dtype, fill = self.draft_logits_spec(vllm_config)
                    self.draft_logits = torch.full(
                        (
                            self.max_num_reqs,
                            self.num_speculative_steps,
                            self.vocab_size,
                        ),
                        fill,
                        dtype=dtype,
                        device=device,
                    )  # fp32
                else:
                    self.other = None

            def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:
                """Dtype and fill for the cached proposal distribution.

                Speculators that write only a subset of columns each step override this.
                """
                return torch.float32, 0.0

            def _validate_local_argmax_reduction(self) -> None:
                return
        '''
SPREAD_OUT = """
        class DraftModelSpeculator(BaseSpeculator):
            # Checks run at load time.
            def _validate_local_argmax_reduction(self) -> None:
                return


            def __init__(self, vllm_config, device):

                self.draft_logits = torch.zeros(
                    (self.max_num_reqs),
                    self.num_speculative_steps,
                    self.vocab_size,
                    dtype=torch.float32,
                    device=device
                )
        """
SPREAD_OUT_APPLIED = '''
        class DraftModelSpeculator(BaseSpeculator):
            def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:
                """Dtype and fill for the cached proposal distribution.

                Speculators that write only a subset of columns each step override this.
                """
                return torch.float32, 0.0

            # Checks run at load time.
            def _validate_local_argmax_reduction(self) -> None:
                return


            def __init__(self, vllm_config, device):

                dtype, fill = self.draft_logits_spec(vllm_config)
                self.draft_logits = torch.full(
                    (
                        self.max_num_reqs,
                        self.num_speculative_steps,
                        self.vocab_size,
                    ),
                    fill,
                    dtype=dtype,
                    device=device,
                )
        '''


def relaid(before: str, *changes: tuple[str, str]) -> str:
    """`before` with its allocation laid out as 0.27.1 lays it out."""
    text = swapped(before, *changes)
    assert same_meaning(text, before)
    return text


ONE_LINE_RELAID = relaid(
    ONE_LINE,
    (
        "torch.zeros(self.max_num_reqs, self.num_speculative_steps, "
        "self.vocab_size, dtype=torch.float32, device=device)",
        "torch.zeros(\n"
        "                        self.max_num_reqs,\n"
        "                        self.num_speculative_steps,\n"
        "                        self.vocab_size,\n"
        "                        dtype=torch.float32,\n"
        "                        device=device,\n"
        "                    )",
    ),
)
SPREAD_OUT_RELAID = relaid(
    SPREAD_OUT,
    ("(self.max_num_reqs),", "self.max_num_reqs,"),
    ("device=device\n", "device=device,\n"),
)

COSMETIC = {
    "comment above the allocation and at the end of it, else branch": (
        ONE_LINE_RELAID,
        ONE_LINE_APPLIED,
    ),
    "members reordered, anchor first after a comment, extra blank lines": (
        SPREAD_OUT_RELAID,
        SPREAD_OUT_APPLIED,
    ),
}
# The edit writes the spec's allocation in place of the file's, so one laid
# out unlike 0.27.1's is reverted to 0.27.1's layout: the same code, and the
# rest of the file as it was. Each case: before, after, reverted.
RELAID_OUT = {
    "one-line allocation, comment above it, no trailing comma": (
        ONE_LINE,
        ONE_LINE_APPLIED,
        ONE_LINE_RELAID,
    ),
    "parenthesized dimension, no trailing comma, members reordered": (
        SPREAD_OUT,
        SPREAD_OUT_APPLIED,
        SPREAD_OUT_RELAID,
    ),
}

# Already applied, written differently: nothing to do.
APPLIED_VARIANTS = {
    "upstream's comment above, reworded docstring, hook placed last": """
        class DraftModelSpeculator(BaseSpeculator):
            def __init__(self, vllm_config, device):
                if self.speculative_config.draft_sample_method == "probabilistic":
                    # Pre-temperature logits, cached from the previous decode step.
                    dtype, fill = self.draft_logits_spec(vllm_config)
                    self.draft_logits = torch.full(
                        (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),
                        fill, dtype=dtype, device=device)

            def _validate_local_argmax_reduction(self) -> None:
                return

            def draft_logits_spec(
                self, vllm_config: VllmConfig
            ) -> tuple[torch.dtype, float]:
                '''How the cached draft distribution is allocated.'''
                return (torch.float32, 0.0)
        """,
}

ZEROS = """\
        self.draft_logits = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.vocab_size,
            dtype=torch.float32,
            device=device,
        )
"""
FULL = """\
        self.draft_logits = torch.full(
            (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),
            fill,
            dtype=dtype,
            device=device,
        )
"""
ANCHOR = """
    def _validate_local_argmax_reduction(self) -> None:
        return
"""


def speculator(init_body: str, *members: str) -> str:
    """A DraftModelSpeculator whose `__init__` is `init_body`, then `members`."""
    return (
        "\nclass DraftModelSpeculator(BaseSpeculator):\n"
        "    def __init__(self, vllm_config, device):\n" + init_body + "".join(members)
    )


DRIFT = {
    "hook returns upstream's head dtype": speculator(
        "        dtype, fill = self.draft_logits_spec(vllm_config)\n" + FULL,
        "\n    def draft_logits_spec(self, vllm_config: VllmConfig) -> "
        "tuple[torch.dtype, float]:\n"
        "        return vllm_config.model_config.head_dtype, 0.0\n",
        ANCHOR,
    ),
    "existing hook with another body, allocation still pending": speculator(
        ZEROS,
        "\n    def draft_logits_spec(self, vllm_config):\n"
        '        return torch.float32, float("-inf")\n',
        ANCHOR,
    ),
    "buffer allocated in bfloat16": speculator(
        swap(ZEROS, "torch.float32", "torch.bfloat16"), ANCHOR
    ),
    "buffer with another shape": speculator(
        swap(ZEROS, "num_speculative_steps,", "num_speculative_steps + 1,"), ANCHOR
    ),
    "buffer left uninitialised": speculator(
        swap(ZEROS, "torch.zeros(", "torch.empty("), ANCHOR
    ),
    "torch.full without draft_logits_spec": speculator(FULL, ANCHOR),
    "no draft_logits buffer": speculator("        self.draft_logits = None\n", ANCHOR),
    "no _validate_local_argmax_reduction to insert before": speculator(ZEROS),
    "no DraftModelSpeculator": """
class BaseSpeculator(ABC):
    pass
""",
    "the hook defined twice, both the spec's": APPLIED.replace(HOOK, HOOK + HOOK),
}

# Applied another way, or in part: reverting gives 0.27.1's code by meaning.
REVERTED = {
    "upstream's comment above, reworded docstring, hook placed last": (
        APPLIED_VARIANTS[
            "upstream's comment above, reworded docstring, hook placed last"
        ],
        """
        class DraftModelSpeculator(BaseSpeculator):
            def __init__(self, vllm_config, device):
                if self.speculative_config.draft_sample_method == "probabilistic":
                    # Pre-temperature logits, cached from the previous decode step.
                    self.draft_logits = torch.zeros(
                        self.max_num_reqs,
                        self.num_speculative_steps,
                        self.vocab_size,
                        dtype=torch.float32,
                        device=device,
                    )

            def _validate_local_argmax_reduction(self) -> None:
                return
        """,
    ),
    # A comment at the end of the lookup's line is about the lookup.
    "comments on the lookup and between it and the allocation": (
        speculator(
            "        # Sized by the hook.\n"
            "        dtype, fill = self.draft_logits_spec(vllm_config)  # per class\n"
            "\n"
            "        # Cached proposal distribution.\n" + FULL,
            HOOK,
            ANCHOR,
        ),
        speculator(
            "        # Sized by the hook.\n"
            "\n"
            "        # Cached proposal distribution.\n" + ZEROS,
            ANCHOR,
        ),
    ),
    "only the hook added": (
        INIT + ZEROS_ALLOCATION + OTHER_METHOD + HOOK + ANCHOR_METHOD,
        PENDING,
    ),
    "only the buffer allocated through the hook": (
        INIT + FULL_ALLOCATION + OTHER_METHOD + ANCHOR_METHOD,
        PENDING,
    ),
}

PATCHED = {"the hook is added and the buffer allocated through it": (PENDING, APPLIED)}
PATCHED.update(COSMETIC)
LEFT_ALONE = {"the edited speculator": APPLIED, **APPLIED_VARIANTS}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_speculator_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(DraftLogitCache, before, after)


@pytest.mark.parametrize(
    "before,after,reverted", RELAID_OUT.values(), ids=RELAID_OUT.keys()
)
def test_allocation_laid_out_otherwise_is_reverted_in_0271_layout(
    before: str, after: str, reverted: str
) -> None:
    checks = case(DraftLogitCache)
    checks.assertCodemod(before, after)
    checks.assertCodemod(after, after)
    checks.assertCodemod(after, reverted, direction=Direction.REVERT)
    checks.assertCodemod(before, before, direction=Direction.REVERT)


@pytest.mark.parametrize("applied,reverted", REVERTED.values(), ids=REVERTED.keys())
def test_applied_speculator_written_otherwise_is_reverted_by_meaning(
    applied: str, reverted: str
) -> None:
    assert_reverted(DraftLogitCache, applied, reverted)


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_applied_speculator_is_left_alone(source: str) -> None:
    assert_left_alone(DraftLogitCache, source)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(DraftLogitCache, source).edit == "draft-logit-cache"


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused_when_reverting_too(source: str) -> None:
    revert_refusal(DraftLogitCache, source)


def test_head_dtype_hook_is_named_in_the_refusal() -> None:
    source = DRIFT["hook returns upstream's head dtype"]
    (drifted,) = refusal(DraftLogitCache, source).drifted
    assert drifted.hunk == HOOK_HUNK
    assert "head_dtype" in drifted.reason
    assert (
        verdicts(DraftLogitCache, source)[BUFFER_HUNK] is State.APPLIED
    )


def test_one_drifted_hunk_leaves_the_other_unwritten() -> None:
    source = DRIFT["buffer allocated in bfloat16"]
    drifted = refusal(DraftLogitCache, source).drifted
    assert [v.hunk for v in drifted] == [BUFFER_HUNK]
    assert verdicts(DraftLogitCache, source)[HOOK_HUNK] is State.PENDING


def test_every_drifted_hunk_is_reported() -> None:
    drifted = refusal(DraftLogitCache, DRIFT["no DraftModelSpeculator"]).drifted
    assert [v.hunk for v in drifted] == [
        BUFFER_HUNK,
        HOOK_HUNK,
    ]
