import libcst as cst
import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms._base import EditRefused, State
from dflash2_backport.transforms.draft_logit_cache import DraftLogitCache

PENDING = """
class BaseSpeculator(ABC):
    pass


class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.vocab_size = self.draft_model_config.get_vocab_size()

        self.draft_logits: torch.Tensor | None = None
        if self.speculative_config.draft_sample_method == "probabilistic":
            self.draft_logits = torch.zeros(
                self.max_num_reqs,
                self.num_speculative_steps,
                self.vocab_size,
                dtype=torch.float32,
                device=device,
            )

    def _build_draft_attn_metadata(self) -> None:
        return None

    def _validate_local_argmax_reduction(self) -> None:
        if not self.use_local_argmax_reduction:
            return
"""
APPLIED = '''
class BaseSpeculator(ABC):
    pass


class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.vocab_size = self.draft_model_config.get_vocab_size()

        self.draft_logits: torch.Tensor | None = None
        if self.speculative_config.draft_sample_method == "probabilistic":
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

    def _build_draft_attn_metadata(self) -> None:
        return None

    def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:
        """Dtype and fill for the cached proposal distribution.

        Speculators that write only a subset of columns each step override this.
        """
        return torch.float32, 0.0

    def _validate_local_argmax_reduction(self) -> None:
        if not self.use_local_argmax_reduction:
            return
'''

COSMETIC = {
    "one-line allocation, comment above it, no trailing comma": (
        """
        class DraftModelSpeculator(BaseSpeculator):
            def __init__(self, vllm_config, device):
                if self.speculative_config.draft_sample_method == 'probabilistic':
                    # Temperature-applied logits of the last draft.
                    self.draft_logits = torch.zeros(self.max_num_reqs, self.num_speculative_steps, self.vocab_size, dtype=torch.float32, device=device)  # fp32
                else:
                    self.other = None

            def _validate_local_argmax_reduction(self) -> None:
                return
        """,
        '''
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
        ''',
    ),
    "members reordered, anchor first after a comment, extra blank lines": (
        """
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
        """,
        '''
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
        ''',
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

DRIFT = {
    "hook returns upstream's head dtype": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        dtype, fill = self.draft_logits_spec(vllm_config)
        self.draft_logits = torch.full(
            (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),
            fill,
            dtype=dtype,
            device=device,
        )

    def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:
        return vllm_config.model_config.head_dtype, 0.0

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "existing hook with another body, allocation still pending": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.vocab_size,
            dtype=torch.float32,
            device=device,
        )

    def draft_logits_spec(self, vllm_config):
        return torch.float32, float("-inf")

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "buffer allocated in bfloat16": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.vocab_size,
            dtype=torch.bfloat16,
            device=device,
        )

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "buffer with another shape": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps + 1,
            self.vocab_size,
            dtype=torch.float32,
            device=device,
        )

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "buffer left uninitialised": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.empty(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.vocab_size,
            dtype=torch.float32,
            device=device,
        )

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "torch.full without draft_logits_spec": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.full(
            (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),
            fill,
            dtype=dtype,
            device=device,
        )

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "no draft_logits buffer": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = None

    def _validate_local_argmax_reduction(self) -> None:
        return
""",
    "no _validate_local_argmax_reduction to insert before": """
class DraftModelSpeculator(BaseSpeculator):
    def __init__(self, vllm_config, device):
        self.draft_logits = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.vocab_size,
            dtype=torch.float32,
            device=device,
        )
""",
    "no DraftModelSpeculator": """
class BaseSpeculator(ABC):
    pass
""",
}


class TestDraftLogitCache(CodemodTest):
    TRANSFORM = DraftLogitCache

    def test_pending_speculator_gets_hook_and_full_allocation(self) -> None:
        self.assertCodemod(PENDING, APPLIED)

    def test_applied_speculator_is_left_alone(self) -> None:
        self.assertCodemod(APPLIED, APPLIED)


@pytest.mark.parametrize("before,after", COSMETIC.values(), ids=COSMETIC.keys())
def test_cosmetic_variants_are_patched(before: str, after: str) -> None:
    case = TestDraftLogitCache()
    case.assertCodemod(before, after)
    case.assertCodemod(after, after)


@pytest.mark.parametrize(
    "source", APPLIED_VARIANTS.values(), ids=APPLIED_VARIANTS.keys()
)
def test_applied_variants_are_left_alone(source: str) -> None:
    TestDraftLogitCache().assertCodemod(source, source)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    with pytest.raises(EditRefused) as refused:
        TestDraftLogitCache().assertCodemod(source, source)
    assert refused.value.edit == "draft-logit-cache"


def test_head_dtype_hook_is_named_in_the_refusal() -> None:
    source = CodemodTest.make_fixture_data(DRIFT["hook returns upstream's head dtype"])
    codemod = DraftLogitCache()
    with pytest.raises(EditRefused) as refused:
        codemod.transform_module(cst.parse_module(source))
    (drifted,) = refused.value.drifted
    assert drifted.hunk == DraftLogitCache.HOOK_HUNK
    assert "head_dtype" in drifted.reason
    states = {v.hunk: v.state for v in codemod.verdicts}
    assert states[DraftLogitCache.BUFFER_HUNK] is State.APPLIED


def test_one_drifted_hunk_leaves_the_other_unwritten() -> None:
    source = CodemodTest.make_fixture_data(DRIFT["buffer allocated in bfloat16"])
    codemod = DraftLogitCache()
    with pytest.raises(EditRefused) as refused:
        codemod.transform_module(cst.parse_module(source))
    assert [v.hunk for v in refused.value.drifted] == [DraftLogitCache.BUFFER_HUNK]
    states = {v.hunk: v.state for v in codemod.verdicts}
    assert states[DraftLogitCache.HOOK_HUNK] is State.PENDING


def test_every_drifted_hunk_is_reported() -> None:
    source = CodemodTest.make_fixture_data(DRIFT["no DraftModelSpeculator"])
    with pytest.raises(EditRefused) as refused:
        DraftLogitCache().transform_module(cst.parse_module(source))
    assert [v.hunk for v in refused.value.drifted] == [
        DraftLogitCache.BUFFER_HUNK,
        DraftLogitCache.HOOK_HUNK,
    ]
