import libcst as cst
import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms._base import EditRefused, State
from dflash2_backport.transforms.speculator_selection import SpeculatorSelection, V2RunnerForcing

# -- init_speculator ------------------------------------------------------

SELECTION_PENDING = """
def init_speculator(vllm_config: VllmConfig, device: torch.device):
    speculative_config = vllm_config.speculative_config
    assert speculative_config is not None
    if speculative_config.method == "dflash":
        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
            DFlashSpeculator,
        )

        return DFlashSpeculator(vllm_config, device)
    elif speculative_config.method == "mtp":
        from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

        return MTPSpeculator(vllm_config, device)
    else:
        raise NotImplementedError(f"{speculative_config.method} is not supported yet.")
"""
SELECTION_APPLIED = """
def init_speculator(vllm_config: VllmConfig, device: torch.device):
    speculative_config = vllm_config.speculative_config
    assert speculative_config is not None
    if speculative_config.method == "dflash":
        if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
            from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                DFlash2Speculator,
            )

            return DFlash2Speculator(vllm_config, device)
        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
            DFlashSpeculator,
        )

        return DFlashSpeculator(vllm_config, device)
    elif speculative_config.method == "mtp":
        from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

        return MTPSpeculator(vllm_config, device)
    else:
        raise NotImplementedError(f"{speculative_config.method} is not supported yet.")
"""

SELECTION_COSMETIC = {
    "dflash is an elif arm, import on one line, no blank line": (
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "mtp":
                return MTPSpeculator(vllm_config, device)
            elif speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "mtp":
                return MTPSpeculator(vllm_config, device)
            elif speculative_config.method == "dflash":
                if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                        DFlash2Speculator,
                    )

                    return DFlash2Speculator(vllm_config, device)
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    ),
    "single quotes are kept, comments inside the arm": (
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == 'dflash':  # block diffusion
                # DFlash1 speculator
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
                    DFlashSpeculator  # no trailing comma
                )


                return DFlashSpeculator(vllm_config, device)
        """,
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == 'dflash':  # block diffusion
                if 'DFlash2DraftModel' in speculative_config.draft_model_config.architectures:
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                        DFlash2Speculator,
                    )

                    return DFlash2Speculator(vllm_config, device)
                # DFlash1 speculator
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
                    DFlashSpeculator  # no trailing comma
                )


                return DFlashSpeculator(vllm_config, device)
        """,
    ),
    "wrapped test and call, trailing comma in the call": (
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if (
                speculative_config.method
                == "dflash"
            ):
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
                    DFlashSpeculator,
                )
                return DFlashSpeculator(
                    vllm_config,
                    device,
                )
        """,
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if (
                speculative_config.method
                == "dflash"
            ):
                if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                        DFlash2Speculator,
                    )

                    return DFlash2Speculator(vllm_config, device)
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
                    DFlashSpeculator,
                )
                return DFlashSpeculator(
                    vllm_config,
                    device,
                )
        """,
    ),
}

SELECTION_DRIFT = {
    "no dflash arm": """
        def init_speculator(vllm_config, device):
            if vllm_config.speculative_config.method == "mtp":
                return MTPSpeculator(vllm_config, device)
        """,
    "dflash arm renamed": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash1":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "dflash arm builds another speculator": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                from my_fork.dflash import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "dflash arm passes other arguments": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device, req_states)
        """,
    "dflash arm already splits on architecture another way": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                architectures = speculative_config.draft_model_config.architectures
                if {"DFlash2DraftModel", "DFlash2BeamDraftModel"}.intersection(architectures):
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                        DFlash2Speculator,
                    )

                    return DFlash2Speculator(vllm_config, device)
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "DFlash2 selection constructed differently": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                        DFlash2Speculator,
                    )

                    return DFlash2Speculator(vllm_config)
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "DFlash2 selection outside the dflash arm": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:
                from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                    DFlash2Speculator,
                )

                return DFlash2Speculator(vllm_config, device)
            if speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "two dflash arms": """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
            elif speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    "no init_speculator": """
        def build_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
}


class TestSpeculatorSelection(CodemodTest):
    TRANSFORM = SpeculatorSelection

    def test_pending_arm_selects_dflash2_first(self) -> None:
        self.assertCodemod(SELECTION_PENDING, SELECTION_APPLIED)

    def test_applied_arm_is_left_alone(self) -> None:
        self.assertCodemod(SELECTION_APPLIED, SELECTION_APPLIED)


@pytest.mark.parametrize(
    "before,after", SELECTION_COSMETIC.values(), ids=SELECTION_COSMETIC.keys()
)
def test_selection_cosmetic_variants_are_patched(before: str, after: str) -> None:
    case = TestSpeculatorSelection()
    case.assertCodemod(before, after)
    case.assertCodemod(after, after)


@pytest.mark.parametrize("source", SELECTION_DRIFT.values(), ids=SELECTION_DRIFT.keys())
def test_selection_semantic_variants_are_refused(source: str) -> None:
    with pytest.raises(EditRefused) as refused:
        TestSpeculatorSelection().assertCodemod(source, source)
    assert refused.value.edit == "speculator-selection"


# -- VllmConfig -----------------------------------------------------------

CONFIG_PENDING = '''
class VllmConfig:
    @property
    def use_v2_model_runner(self) -> bool:
        use_v2_model_runner = envs.VLLM_USE_V2_MODEL_RUNNER
        if use_v2_model_runner is not None:
            return use_v2_model_runner

        # Mixed sliding/full DFlash drafts need multiple KV groups (V2 only).
        if self._dflash_needs_multi_kv_group():
            return True

        if not self._is_default_v2_model_runner_model():
            return False

        return True

    def _dflash_needs_multi_kv_group(self) -> bool:
        """Whether a DFlash draft mixes sliding-window and full attention."""
        spec = self.speculative_config
        return spec is not None and spec.method == "dflash"

    def _is_default_v2_model_runner_model(self) -> bool:
        return False
'''
CONFIG_APPLIED = '''
class VllmConfig:
    @property
    def use_v2_model_runner(self) -> bool:
        use_v2_model_runner = envs.VLLM_USE_V2_MODEL_RUNNER
        if use_v2_model_runner is not None:
            return use_v2_model_runner

        # Mixed sliding/full DFlash drafts need multiple KV groups (V2 only).
        if self._dflash_needs_multi_kv_group():
            return True

        # The DFlash2 candidate selector exists only in the V2 speculator. On V1
        # the same checkpoint drafts through DFlashProposer, which never calls
        # it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.
        if self._is_dflash2_draft():
            return True

        if not self._is_default_v2_model_runner_model():
            return False

        return True

    def _is_dflash2_draft(self) -> bool:
        """Whether the DFlash draft is a DFlash2 one, by the architecture the
        speculator selects on (v1/worker/gpu/spec_decode/__init__.py)."""
        spec = self.speculative_config
        if spec is None or spec.method != "dflash":
            return False
        draft_config = getattr(spec, "draft_model_config", None)
        if draft_config is None:
            return False
        return "DFlash2DraftModel" in (draft_config.architectures or [])

    def _dflash_needs_multi_kv_group(self) -> bool:
        """Whether a DFlash draft mixes sliding-window and full attention."""
        spec = self.speculative_config
        return spec is not None and spec.method == "dflash"

    def _is_default_v2_model_runner_model(self) -> bool:
        return False
'''

HELPER = '''
    def _is_dflash2_draft(self) -> bool:
        """Whether the DFlash draft is a DFlash2 one, by the architecture the
        speculator selects on (v1/worker/gpu/spec_decode/__init__.py)."""
        spec = self.speculative_config
        if spec is None or spec.method != "dflash":
            return False
        draft_config = getattr(spec, "draft_model_config", None)
        if draft_config is None:
            return False
        return "DFlash2DraftModel" in (draft_config.architectures or [])
'''
CONFIG_COSMETIC = {
    "members reordered, anchor first, comment above it": (
        """
        class VllmConfig:
            # Multi-KV-group detection.
            def _dflash_needs_multi_kv_group(self) -> bool:
                return False

            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():  # V2 only
                    return True
                return False
        """,
        '''
        class VllmConfig:
            def _is_dflash2_draft(self) -> bool:
                """Whether the DFlash draft is a DFlash2 one, by the architecture the
                speculator selects on (v1/worker/gpu/spec_decode/__init__.py)."""
                spec = self.speculative_config
                if spec is None or spec.method != "dflash":
                    return False
                draft_config = getattr(spec, "draft_model_config", None)
                if draft_config is None:
                    return False
                return "DFlash2DraftModel" in (draft_config.architectures or [])

            # Multi-KV-group detection.
            def _dflash_needs_multi_kv_group(self) -> bool:
                return False

            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():  # V2 only
                    return True

                # The DFlash2 candidate selector exists only in the V2 speculator. On V1
                # the same checkpoint drafts through DFlashProposer, which never calls
                # it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.
                if self._is_dflash2_draft():
                    return True
                return False
        ''',
    ),
    "parenthesized anchor branch, extra blank lines": (
        """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if (
                    self._dflash_needs_multi_kv_group()
                ):

                    return (True)


                return False


            def _dflash_needs_multi_kv_group(self) -> bool:
                return False
        """,
        '''
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if (
                    self._dflash_needs_multi_kv_group()
                ):

                    return (True)

                # The DFlash2 candidate selector exists only in the V2 speculator. On V1
                # the same checkpoint drafts through DFlashProposer, which never calls
                # it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.
                if self._is_dflash2_draft():
                    return True


                return False


            def _is_dflash2_draft(self) -> bool:
                """Whether the DFlash draft is a DFlash2 one, by the architecture the
                speculator selects on (v1/worker/gpu/spec_decode/__init__.py)."""
                spec = self.speculative_config
                if spec is None or spec.method != "dflash":
                    return False
                draft_config = getattr(spec, "draft_model_config", None)
                if draft_config is None:
                    return False
                return "DFlash2DraftModel" in (draft_config.architectures or [])


            def _dflash_needs_multi_kv_group(self) -> bool:
                return False
        ''',
    ),
}

# Already applied, written differently: nothing to do.
CONFIG_APPLIED_VARIANTS = {
    "reworded docstring, single quotes, helper placed last": '''
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():
                    return True
                # DFlash2 needs V2.
                if self._is_dflash2_draft():
                    return True
                return False

            def _dflash_needs_multi_kv_group(self) -> bool:
                return False

            def _is_dflash2_draft(self) -> bool:
                """True for a DFlash2 draft."""
                spec = self.speculative_config
                if spec is None or spec.method != 'dflash':
                    return False
                draft_config = getattr(spec, 'draft_model_config', None)
                if draft_config is None:
                    return False
                return 'DFlash2DraftModel' in (
                    draft_config.architectures or []
                )
        ''',
}

CONFIG_DRIFT = {
    "V2 forcing moved out of use_v2_model_runner": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                unsupported = self._get_v1_model_runner_unsupported_features()
                return bool(unsupported)

            def _dflash_needs_multi_kv_group(self) -> bool:
                return False

            def _get_v1_model_runner_unsupported_features(self) -> list[str]:
                unsupported = []
                if self._dflash_needs_multi_kv_group():
                    unsupported.append("mixed sliding/full dflash drafts")
                return unsupported
        """,
    "anchor branch does something else": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():
                    return False
                return True

            def _dflash_needs_multi_kv_group(self) -> bool:
                return False
        """,
    "DFlash2 branch after the checks that return False": """
class VllmConfig:
    @property
    def use_v2_model_runner(self) -> bool:
        if self._dflash_needs_multi_kv_group():
            return True
        if not self._is_default_v2_model_runner_model():
            return False
        if self._is_dflash2_draft():
            return True
        return True

    def _dflash_needs_multi_kv_group(self) -> bool:
        return False
"""
    + HELPER,
    "_is_dflash2_draft with another body": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():
                    return True
                return False

            def _is_dflash2_draft(self) -> bool:
                return "DFlash2" in self.speculative_config.method

            def _dflash_needs_multi_kv_group(self) -> bool:
                return False
        """,
    "_is_dflash2_draft made a property": """
class VllmConfig:
    @property
    def use_v2_model_runner(self) -> bool:
        if self._dflash_needs_multi_kv_group():
            return True
        return False

    def _dflash_needs_multi_kv_group(self) -> bool:
        return False
"""
    + HELPER.replace("    def _is", "    @property\n    def _is"),
    "no _dflash_needs_multi_kv_group to insert before": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():
                    return True
                return False
        """,
    "no VllmConfig": """
        class ModelConfig:
            pass
        """,
}


class TestV2RunnerForcing(CodemodTest):
    TRANSFORM = V2RunnerForcing

    def test_pending_config_gains_branch_and_helper(self) -> None:
        self.assertCodemod(CONFIG_PENDING, CONFIG_APPLIED)

    def test_applied_config_is_left_alone(self) -> None:
        self.assertCodemod(CONFIG_APPLIED, CONFIG_APPLIED)


@pytest.mark.parametrize(
    "before,after", CONFIG_COSMETIC.values(), ids=CONFIG_COSMETIC.keys()
)
def test_config_cosmetic_variants_are_patched(before: str, after: str) -> None:
    case = TestV2RunnerForcing()
    case.assertCodemod(before, after)
    case.assertCodemod(after, after)


@pytest.mark.parametrize(
    "source", CONFIG_APPLIED_VARIANTS.values(), ids=CONFIG_APPLIED_VARIANTS.keys()
)
def test_config_applied_variants_are_left_alone(source: str) -> None:
    TestV2RunnerForcing().assertCodemod(source, source)


@pytest.mark.parametrize("source", CONFIG_DRIFT.values(), ids=CONFIG_DRIFT.keys())
def test_config_semantic_variants_are_refused(source: str) -> None:
    with pytest.raises(EditRefused) as refused:
        TestV2RunnerForcing().assertCodemod(source, source)
    assert refused.value.edit == "speculator-selection"


def test_moved_v2_forcing_names_where_it_went() -> None:
    source = CodemodTest.make_fixture_data(
        CONFIG_DRIFT["V2 forcing moved out of use_v2_model_runner"]
    )
    with pytest.raises(EditRefused) as refused:
        V2RunnerForcing().transform_module(cst.parse_module(source))
    (drifted,) = refused.value.drifted
    assert drifted.hunk == V2RunnerForcing.BRANCH_HUNK
    assert "_get_v1_model_runner_unsupported_features" in drifted.reason


def test_every_drifted_hunk_is_reported() -> None:
    source = CodemodTest.make_fixture_data(CONFIG_DRIFT["no VllmConfig"])
    with pytest.raises(EditRefused) as refused:
        V2RunnerForcing().transform_module(cst.parse_module(source))
    assert [v.hunk for v in refused.value.drifted] == [
        V2RunnerForcing.BRANCH_HUNK,
        V2RunnerForcing.HELPER_HUNK,
    ]


def test_one_drifted_hunk_leaves_the_other_unwritten() -> None:
    source = CodemodTest.make_fixture_data(
        CONFIG_DRIFT["anchor branch does something else"]
    )
    codemod = V2RunnerForcing()
    with pytest.raises(EditRefused):
        codemod.transform_module(cst.parse_module(source))
    states = {v.hunk: v.state for v in codemod.verdicts}
    assert states == {
        V2RunnerForcing.BRANCH_HUNK: State.DRIFT,
        V2RunnerForcing.HELPER_HUNK: State.PENDING,
    }


def test_inserted_blank_lines_carry_no_indentation() -> None:
    # CodemodTest blanks whitespace-only lines before comparing, so look at
    # the bytes.
    source = CodemodTest.make_fixture_data(CONFIG_PENDING)
    output = V2RunnerForcing().transform_module(cst.parse_module(source)).code
    assert output == CodemodTest.make_fixture_data(CONFIG_APPLIED)
