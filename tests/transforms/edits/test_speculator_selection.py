import textwrap

import pytest
from libcst.codemod import CodemodTest

from dflash2_backport.transforms.edits.speculator_selection.judge import BRANCH as FORCING_BRANCH
from dflash2_backport.transforms.edits.speculator_selection.judge import HUNKS
from dflash2_backport.transforms.framework.hunk_files import class_body
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.speculator_selection.writer import (
    SpeculatorSelection,
    V2RunnerForcing,
)

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)
from dflash2_backport.transforms.edits.speculator_selection.judge import V2_RUNNER_FORCING

BRANCH_HUNK, HELPER_HUNK = (h.name for h in V2_RUNNER_FORCING.hunks)

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

# Pieces of the variants below, at their depth in init_speculator.
SELECTOR = """
def init_speculator(vllm_config, device):
    speculative_config = vllm_config.speculative_config
"""
DFLASH_TEST = '    if speculative_config.method == "dflash":\n'
DFLASH1_BODY = """\
        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
        return DFlashSpeculator(vllm_config, device)
"""
DFLASH1_ARM = DFLASH_TEST + DFLASH1_BODY
DFLASH2_TEST = (
    '"DFlash2DraftModel" in speculative_config.draft_model_config.architectures'
)
DFLASH2_SELECTION = f"""\
        if {DFLASH2_TEST}:
            from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (
                DFlash2Speculator,
            )

            return DFlash2Speculator(vllm_config, device)
"""

SELECTION_DRIFT = {
    "no dflash arm": """
        def init_speculator(vllm_config, device):
            if vllm_config.speculative_config.method == "mtp":
                return MTPSpeculator(vllm_config, device)
        """,
    "dflash arm renamed": SELECTOR + swap(DFLASH1_ARM, '"dflash"', '"dflash1"'),
    "dflash arm builds another speculator": SELECTOR
    + swap(
        DFLASH1_ARM,
        "from vllm.v1.worker.gpu.spec_decode.dflash.speculator import",
        "from my_fork.dflash import",
    ),
    "dflash arm passes other arguments": SELECTOR
    + swap(DFLASH1_ARM, "(vllm_config, device)", "(vllm_config, device, req_states)"),
    "dflash arm already splits on architecture another way": SELECTOR
    + DFLASH_TEST
    + "        architectures = speculative_config.draft_model_config.architectures\n"
    + swap(
        DFLASH2_SELECTION,
        DFLASH2_TEST,
        '{"DFlash2DraftModel", "DFlash2BeamDraftModel"}.intersection(architectures)',
    )
    + DFLASH1_BODY,
    "DFlash2 selection constructed differently": SELECTOR
    + DFLASH_TEST
    + swap(DFLASH2_SELECTION, "(vllm_config, device)", "(vllm_config)")
    + DFLASH1_BODY,
    "DFlash2 selection outside the dflash arm": SELECTOR
    + textwrap.indent(textwrap.dedent(DFLASH2_SELECTION), "    ")
    + DFLASH1_ARM,
    "two dflash arms": SELECTOR + DFLASH1_ARM + swap(DFLASH1_ARM, "if ", "elif "),
    # use_eagle() is true for "dflash": the dflash arm behind it is dead code.
    "an arm ahead of the dflash arm catches dflash drafts": SELECTOR
    + "    if speculative_config.use_eagle():\n"
    + "        return EagleSpeculator(vllm_config, device)\n"
    + swap(DFLASH1_ARM, "if ", "elif "),
    "a method list ahead of the dflash arm names dflash": SELECTOR
    + '    if speculative_config.method in ("eagle", "dflash"):\n'
    + "        return EagleSpeculator(vllm_config, device)\n"
    + swap(DFLASH1_ARM, "if ", "elif "),
    "a return ahead of the dflash arm's chain": SELECTOR
    + "    return build_speculator(vllm_config, device)\n"
    + DFLASH1_ARM,
    "no init_speculator": swap(SELECTOR, "init_speculator", "build_speculator")
    + DFLASH1_ARM,
}

# Applied another way: reverting gives 0.27.1's code by meaning.
SELECTION_REVERTED = {
    "comment above the DFlash2 branch, blank line after it": (
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":  # block diffusion
                # DFlash2 checkpoints first.
                if "DFlash2DraftModel" in (
                    speculative_config.draft_model_config.architectures
                ):
                    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
                    return DFlash2Speculator(vllm_config, device)

                # DFlash1 speculator
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
        # The blank line after the DFlash2 branch belongs to the fallback's
        # lines, which the revert leaves as they are.
        """
        def init_speculator(vllm_config, device):
            speculative_config = vllm_config.speculative_config
            if speculative_config.method == "dflash":  # block diffusion

                # DFlash1 speculator
                from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
                return DFlashSpeculator(vllm_config, device)
        """,
    ),
}


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
# What the edit adds, at its depth in VllmConfig.
BRANCH = textwrap.indent(FORCING_BRANCH.after, " " * 8)
HELPER = "\n" + class_body(HUNKS.patched("DFlash2 draft detection"))
ANCHOR = "\n    def _dflash_needs_multi_kv_group"
CONFIG_APPLIED = swapped(
    CONFIG_PENDING,
    ("            return True\n\n", "            return True\n" + BRANCH + "\n"),
    (ANCHOR, HELPER + ANCHOR),
)

REORDERED = """
class VllmConfig:
    # Multi-KV-group detection.
    def _dflash_needs_multi_kv_group(self) -> bool:
        return False

    @property
    def use_v2_model_runner(self) -> bool:
        if self._dflash_needs_multi_kv_group():  # V2 only
            return True
        return False
"""
SPREAD_OUT = """
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
"""
CONFIG_COSMETIC = {
    "members reordered, anchor first, comment above it": (
        REORDERED,
        swapped(
            REORDERED,
            ("\n    # Multi-KV", HELPER + "\n    # Multi-KV"),
            (
                "# V2 only\n            return True\n",
                "# V2 only\n            return True\n" + BRANCH,
            ),
        ),
    ),
    "parenthesized anchor branch, extra blank lines": (
        SPREAD_OUT,
        swapped(
            SPREAD_OUT,
            ("return (True)\n", "return (True)\n" + BRANCH),
            ("\n\n" + ANCHOR, "\n\n\n" + HELPER.lstrip("\n") + "\n" + ANCHOR),
        ),
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
    "a check that returns False moved ahead of the anchor": swapped(
        CONFIG_PENDING,
        (
            "        # Mixed sliding/full DFlash drafts need multiple KV groups (V2 only).\n",
            "        if not self._is_default_v2_model_runner_model():\n"
            "            return False\n\n"
            "        # Mixed sliding/full DFlash drafts need multiple KV groups (V2 only).\n",
        ),
    ),
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
    "_is_dflash2_draft defined twice, both the backport's": swap(
        CONFIG_APPLIED, HELPER, HELPER + HELPER
    ),
}


# Applied another way, or in part: reverting gives 0.27.1's code by meaning.
CONFIG_REVERTED = {
    "reworded docstring, single quotes, helper placed last": (
        CONFIG_APPLIED_VARIANTS[
            "reworded docstring, single quotes, helper placed last"
        ],
        """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if self._dflash_needs_multi_kv_group():
                    return True
                return False

            def _dflash_needs_multi_kv_group(self) -> bool:
                return False
        """,
    ),
    "helper placed first, after a comment of its own": (
        swapped(
            CONFIG_APPLIED,
            (HELPER + ANCHOR, ANCHOR),
            (
                "class VllmConfig:\n",
                "class VllmConfig:\n    # DFlash2 detection." + HELPER + "\n",
            ),
        ),
        CONFIG_PENDING,
    ),
    "only the branch applied": (
        swap(CONFIG_APPLIED, HELPER, ""),
        CONFIG_PENDING,
    ),
    "only the helper applied": (
        swap(CONFIG_APPLIED, BRANCH, ""),
        CONFIG_PENDING,
    ),
}


# -- both files ------------------------------------------------------------


def both(selection: dict, config: dict) -> dict[str, tuple]:
    """One table of (codemod, *texts) cases from the two files' tables."""
    table: dict[str, tuple] = {}
    for where, transform, cases in (
        ("init_speculator", SpeculatorSelection, selection),
        ("VllmConfig", V2RunnerForcing, config),
    ):
        for name, texts in cases.items():
            texts = texts if isinstance(texts, tuple) else (texts,)
            table[f"{where}: {name}"] = (transform, *texts)
    return table


PATCHED = both(
    {"the dflash arm selects DFlash2 first": (SELECTION_PENDING, SELECTION_APPLIED)}
    | SELECTION_COSMETIC,
    {"the branch and the helper are added": (CONFIG_PENDING, CONFIG_APPLIED)}
    | CONFIG_COSMETIC,
)
LEFT_ALONE = both(
    {"the edited arm": SELECTION_APPLIED},
    {"the edited config": CONFIG_APPLIED} | CONFIG_APPLIED_VARIANTS,
)
DRIFT = both(SELECTION_DRIFT, CONFIG_DRIFT)
REVERTED = both(SELECTION_REVERTED, CONFIG_REVERTED)


@pytest.mark.parametrize("transform,before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_code_is_patched_then_left_alone(transform, before, after) -> None:
    assert_patched(transform, before, after)


@pytest.mark.parametrize("transform,source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_applied_code_is_left_alone(transform, source: str) -> None:
    assert_left_alone(transform, source)


@pytest.mark.parametrize("transform,source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(transform, source: str) -> None:
    assert refusal(transform, source).edit == "speculator-selection"


@pytest.mark.parametrize(
    "transform,applied,reverted", REVERTED.values(), ids=REVERTED.keys()
)
def test_applied_code_written_otherwise_is_reverted_by_meaning(
    transform, applied: str, reverted: str
) -> None:
    assert_reverted(transform, applied, reverted)


@pytest.mark.parametrize("transform,source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused_when_reverting_too(
    transform, source: str
) -> None:
    revert_refusal(transform, source)


def test_moved_v2_forcing_names_where_it_went() -> None:
    source = CONFIG_DRIFT["V2 forcing moved out of use_v2_model_runner"]
    (drifted,) = refusal(V2RunnerForcing, source).drifted
    assert drifted.hunk == BRANCH_HUNK
    assert "_get_v1_model_runner_unsupported_features" in drifted.reason


def test_every_drifted_hunk_is_reported() -> None:
    drifted = refusal(V2RunnerForcing, CONFIG_DRIFT["no VllmConfig"]).drifted
    assert [v.hunk for v in drifted] == [
        BRANCH_HUNK,
        HELPER_HUNK,
    ]


def test_one_drifted_hunk_leaves_the_other_unwritten() -> None:
    source = CONFIG_DRIFT["anchor branch does something else"]
    refusal(V2RunnerForcing, source)
    assert verdicts(V2RunnerForcing, source) == {
        BRANCH_HUNK: State.DRIFT,
        HELPER_HUNK: State.PENDING,
    }


def test_inserted_blank_lines_carry_no_indentation() -> None:
    # CodemodTest blanks whitespace-only lines before comparing, so look at
    # the bytes.
    source = CodemodTest.make_fixture_data(CONFIG_PENDING)
    expected = CodemodTest.make_fixture_data(CONFIG_APPLIED)
    assert output(V2RunnerForcing, source) == expected
