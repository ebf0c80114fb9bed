"""Upstream's own tests of the DFlash2 path and of the fixes the backport
carries, from the source distribution of the release that has each, run
against vLLM 0.27.1 and 0.26.0 as each ships, as `apply --only-pr` patches
it and as `apply` patches it. (0.27.0's targets are 0.27.1's bytes,
tests/vllm_tree/test_versions.py, so its trees run the same code.)

They run with pytest in the testkit venvs (env.testkit_env), without
upstream's conftest.py (`--noconftest`): it imports half of vLLM's test
suite, and the files run here need only what they import themselves.

* vLLM 0.28.0's tests of DFlash2 itself: tests/v1/spec_decode/
  test_dflash2.py (the grouped convolution, the selector) and
  test_dflash_causality.py (the `causality` edit), unchanged on 0.27.1. On
  0.26.0 the causality file imports two names 0.27.0 added for EAGLE-3's
  auxiliary layers (`_get_dflash_fc_input_size`,
  `get_eagle3_aux_layers_from_config`), which only its last three tests
  read: those names leave the import and those tests are deselected
  (`RELEASE_ADAPTATION`). Not run: test_dflash_lookahead.py, whose
  scheduler is built from Qwen/Qwen3-8B's and z-lab/Qwen3-8B-DFlash-b16's
  configs on the Hugging Face Hub, which the test machines cannot reach.
* vLLM 0.33.0's tests of the draft's max_position_embeddings (#57941), the
  ones that need no Hugging Face Hub ("override" in their names), unchanged.
* vLLM 0.28.0's tests/v1/spec_decode/test_dflash_prepare_inputs.py (the
  prepare-inputs guards). It hard-codes CUDA; on the CPU it runs with the
  smallest change that lets it: `CPU_ADAPTATION` below, three lines, each
  required to be there exactly once. On 0.26.0, whose launcher lacks the
  sampling-state copy 0.27.0 moved into it, that copy's four arguments and
  two asserts go too (`RELEASE_ADAPTATION`). Unchanged, under the `gpu`
  marker.
* vLLM 0.29.0's test_rejection_sampler_utils.py::
  test_gumbel_drafted_rejection_sample_is_unbiased (the draft noise stream):
  200 000 trials through `gumbel_sample(..., is_drafting=True)` and
  0.27.1's `rejection_sample`, CUDA only, unchanged under the `gpu` marker.
  On the CPU, test_runtime_draft_noise_chi2.py holds the same property.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.runtime.harness import snippet_env
from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

#: Upstream's tests run on each release whose edits take a form of their
#: own (`edit_set_release`), three ways.
TREES = ("pristine", "only-pr", "patched")

#: The draft max_position_embeddings fix (#57941), 0.33.0: the helper's
#: tests, which need no Hub ("override" in their names).
MAX_POSITION = ("0.33.0", "config/test_speculative_draft_max_position_embeddings.py", "override")
MAX_POSITION_TESTS = 10
#: What each release fails of them without the fix. 0.27.1's helper raises
#: a draft whatever its RoPE; 0.26.0 has no helper (0.27.0 added it), so
#: every test fails there (None: all of them).
UNFIXED_FAILURES: dict[str, set[str] | None] = {
    "0.27.1": {f"test_override_skips_other_rope_types[rope_parameters{i}]" for i in range(4)},
    "0.26.0": None,
}


def start_upstream(python: Path, version: str, relative: str, select: str, snippets,
                   scratch: Path) -> tuple[subprocess.Popen, Path]:
    """Upstream's selected tests under pytest in `python`, started; the
    report it will write (read_outcomes reads it)."""
    root = upstream_tests(version, relative)
    report = scratch / "report.xml"
    environment = snippet_env(
        snippets.cache_root_for(python), plugin_dir=snippets.plugin_dir,
        # The cached files stay as fetched: no bytecode beside them.
        extra={"PYTHONDONTWRITEBYTECODE": "1"},
    )
    with open(scratch / "output.log", "w") as log:
        run = subprocess.Popen(
            [str(python), "-m", "pytest", f"tests/{relative}", "-k", select, "--noconftest",
             "-p", "no:cacheprovider", "-q", f"--junitxml={report}", "--rootdir", str(root)],
            cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return run, report


def read_outcomes(run: subprocess.Popen, report: Path) -> dict[str, str]:
    """Each selected test's outcome ("passed", "failed", "error", "skipped")."""
    run.wait(timeout=600)
    log = (report.parent / "output.log").read_text(errors="replace")
    assert report.exists(), log[-8000:]
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        found = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = {"failure": "failed"}.get(found[0], found[0]) if found else "passed"
    return outcomes


@pytest.fixture(scope="module")
def max_position(edit_set_pythons, snippets, tmp_path_factory) -> dict[str, dict[str, str]]:
    # The three trees side by side: each run is a fresh pytest of its own.
    started = {
        name: start_upstream(python, *MAX_POSITION, snippets, tmp_path_factory.mktemp(name))
        for name, python in edit_set_pythons.items()
    }
    try:
        return {name: read_outcomes(*run) for name, run in started.items()}
    finally:
        for run, _ in started.values():
            run.kill()
            run.wait()


def test_upstream_s_max_position_tests_pass_on_the_patched_tree(max_position) -> None:
    outcomes = max_position["patched"]
    assert len(outcomes) == MAX_POSITION_TESTS
    assert set(outcomes.values()) == {"passed"}, outcomes


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_upstream_s_max_position_tests_fail_where_the_fix_is_missing(
    max_position, edit_set_release, tree: str
) -> None:
    outcomes = max_position[tree]
    assert set(outcomes) == set(max_position["patched"])
    unfixed = UNFIXED_FAILURES[edit_set_release]
    unfixed = set(outcomes) if unfixed is None else unfixed
    assert {name for name, outcome in outcomes.items() if outcome != "passed"} == unfixed
    assert {outcomes[name] for name in unfixed} == {"failed"}


# -- the prepare-inputs guards ----------------------------------------------------

PREPARE_INPUTS = "v1/spec_decode/test_dflash_prepare_inputs.py"
UNBIASED = "v1/spec_decode/test_rejection_sampler_utils.py"
UNBIASED_TEST = "test_gumbel_drafted_rejection_sample_is_unbiased"

# The file as 0.28.0 ships it runs on "cuda", skips without it and
# synchronises the accelerator; on the CPU: the CPU device, no skip, nothing
# to synchronise.
CPU_ADAPTATION = (
    ('device = torch.device("cuda")', 'device = torch.device("cpu")'),
    (
        "pytestmark = pytest.mark.skipif(\n"
        '    not torch.cuda.is_available(), reason="requires a CUDA device"\n'
        ")\n",
        "pytestmark = []\n",
    ),
    ("    torch.accelerator.synchronize()\n", ""),
)

# What a release before 0.27.0 needs beyond that, file by file: the file's
# text changes, each there exactly once, and the tests to deselect.
RELEASE_ADAPTATION: dict[tuple[str, str], tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    # 0.26.0 copies the request's temperature and seed on the host; 0.27.0
    # moved that copy into prepare_dflash_inputs, with four arguments.
    ("0.26.0", "test_dflash_prepare_inputs.py"): (
        (
            ("        sample_idx_mapping,\n        temperature,\n        seeds,\n",
             "        sample_idx_mapping,\n"),
            ("        input_temperature,\n        input_seeds,\n        block_table,\n",
             "        block_table,\n"),
            ("    assert out.temperature[2].item() == 1.0\n"
             "    assert out.seeds[2].item() == 17\n", ""),
        ),
        (),
    ),
    # 0.27.0 moved the fc layer's width into _get_dflash_fc_input_size and
    # added get_eagle3_aux_layers_from_config; the last three tests are of
    # those, and 0.26.0 has neither.
    ("0.26.0", "test_dflash_causality.py"): (
        (
            ("    _get_dflash_fc_input_size,\n", ""),
            ("from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (\n"
             "    get_eagle3_aux_layers_from_config,\n"
             ")\n", ""),
        ),
        ("test_dflash_fc_uses_aux_layer_count", "test_eagle_aux_layers_preserves_legacy_layer_ids"),
    ),
}

# Runs in a testkit interpreter: one report per test.
RUN_PYTEST = """
import sys

import pytest
from runtime_guest import emit, index_scalars_as_numpy_allows

# Kernels run in Triton's interpreter (TRITON_INTERPRET=1), which 0.26.0's
# Triton 3.6 runs with NumPy 2.4 only so.
index_scalars_as_numpy_allows()
outcomes = {}


class Outcomes:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            text = "" if report.passed else ": " + str(report.longrepr)[-800:]
            outcomes[report.nodeid.rsplit("::", 1)[-1]] = report.outcome + text

    def pytest_collectreport(self, report):
        # A file that does not import: its name, for the tests it holds.
        if report.failed and report.nodeid:
            outcomes[report.nodeid] = "error: " + str(report.longrepr)[-800:]


code = pytest.main(["-p", "no:cacheprovider", "--noconftest", "-q", *sys.argv[1:]],
                   plugins=[Outcomes()])
emit({"exit": int(code), "outcomes": outcomes})
"""


def changed(source: str, changes) -> str:  # type: ignore[no-untyped-def]
    for old, new in changes:
        assert source.count(old) == 1, f"upstream's file changed: {old!r}"
        source = source.replace(old, new)
    return source


def cpu_adapted(source: str) -> str:
    return changed(source, CPU_ADAPTATION)


def for_release(release: str, name: str, source: str) -> tuple[str, list[str]]:
    """Upstream's file as `release` can run it, and the pytest arguments
    that deselect what it cannot."""
    changes, deselected = RELEASE_ADAPTATION.get((release, name), ((), ()))
    return changed(source, changes), [f"--deselect={name}::{test}" for test in deselected]


@pytest.fixture(scope="module")
def prepare_inputs_on_cpu(snippets, edit_set_pythons, edit_set_release, tmp_path_factory):
    upstream = upstream_tests("0.28.0", PREPARE_INPUTS) / "tests" / PREPARE_INPUTS
    scratch = tmp_path_factory.mktemp("upstream")
    source, _ = for_release(edit_set_release, upstream.name, cpu_adapted(upstream.read_text()))
    (scratch / upstream.name).write_text(source)
    runs = [snippets.start(edit_set_pythons[tree], RUN_PYTEST, args=[str(scratch / upstream.name)])
            for tree in TREES]
    return dict(zip(TREES, snippets.gather(runs)))


UPSTREAM_PREPARE_TESTS = [
    "test_prepare_dflash_inputs_excludes_rejected_context_suffix",
    "test_prepare_dflash_inputs_never_writes_the_null_block",
]


def test_upstream_0_28_0s_prepare_inputs_tests_pass_on_the_patched_tree(
    prepare_inputs_on_cpu,
):
    patched = prepare_inputs_on_cpu["patched"]
    assert patched["outcomes"] == dict.fromkeys(UPSTREAM_PREPARE_TESTS, "passed"), patched
    assert patched["exit"] == 0


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_and_fail_where_the_guards_are_missing(prepare_inputs_on_cpu, tree):
    pristine = prepare_inputs_on_cpu[tree]
    assert sorted(pristine["outcomes"]) == UPSTREAM_PREPARE_TESTS
    # Failed on the guards' own asserts, not on running the kernel.
    assert all(o.startswith("failed") and o.endswith("AssertionError")
               for o in pristine["outcomes"].values()), pristine
    assert pristine["exit"] == 1


# -- DFlash2 itself -------------------------------------------------------------

DFLASH2_FILES = ("v1/spec_decode/test_dflash2.py", "v1/spec_decode/test_dflash_causality.py")
DFLASH2_TESTS = [
    "test_grouped_conv_matches_reference[5]",
    "test_grouped_conv_matches_reference[8]",
    "test_selector_edges_match_sequential_reference",
    "test_selector_leaves_greedy_drafting_without_proposal_logits",
    "test_selector_asks_for_fp32_proposal_logits",
]
CAUSALITY_TESTS = [
    *(f"test_dflash_has_any_non_causal[config{i}-{expected}]"
      for i, expected in enumerate(["False", "True", "True", "False", "True", "False", "True", "True"])),
    "test_dflash_layer_causal_is_per_layer",
    "test_dflash_layer_causal_honors_top_level_override",
]
#: The causality tests of 0.27.0's code, which 0.26.0 lacks (RELEASE_ADAPTATION).
CAUSALITY_TESTS_0_27 = [
    "test_dflash_fc_uses_aux_layer_count",
    "test_eagle_aux_layers_preserves_legacy_layer_ids[dflash_config]",
    "test_eagle_aux_layers_preserves_legacy_layer_ids[eagle_config]",
]
#: What the release fails as it ships: it infers a DFlash2 draft's
#: causality from its layer types, not from the config's `is_causal`.
CAUSALITY_UNFIXED = {
    "test_dflash_has_any_non_causal[config2-True]",
    "test_dflash_has_any_non_causal[config3-False]",
    "test_dflash_layer_causal_honors_top_level_override",
}


@pytest.fixture(scope="module")
def dflash2_tests(snippets, edit_set_pythons, edit_set_release, tmp_path_factory):
    root = upstream_tests("0.28.0", *DFLASH2_FILES) / "tests"
    scratch = tmp_path_factory.mktemp("upstream")
    arguments = ["--continue-on-collection-errors", "--rootdir", str(scratch)]
    for relative in DFLASH2_FILES:
        name = Path(relative).name
        source, deselect = for_release(edit_set_release, name, (root / relative).read_text())
        (scratch / name).write_text(source)
        arguments += [str(scratch / name), *deselect]
    runs = [snippets.start(edit_set_pythons[tree], RUN_PYTEST, args=arguments) for tree in TREES]
    return dict(zip(TREES, snippets.gather(runs)))


def expected_dflash2_tests(release: str) -> list[str]:
    return DFLASH2_TESTS + CAUSALITY_TESTS + ([] if release == "0.26.0" else CAUSALITY_TESTS_0_27)


@pytest.mark.parametrize("tree", ["only-pr", "patched"])
def test_upstream_0_28_0s_dflash2_tests_pass_where_the_pr_is_applied(dflash2_tests, edit_set_release, tree):
    ran = dflash2_tests[tree]
    assert ran["outcomes"] == dict.fromkeys(expected_dflash2_tests(edit_set_release), "passed"), ran
    assert ran["exit"] == 0


def test_and_on_the_release_as_it_ships_dflash2_is_missing_and_causality_inferred(
    dflash2_tests, edit_set_release
):
    ran = dflash2_tests["pristine"]["outcomes"]
    assert ran.pop("test_dflash2.py").startswith("error: "), ran
    assert set(ran) == set(CAUSALITY_TESTS) | (
        set() if edit_set_release == "0.26.0" else set(CAUSALITY_TESTS_0_27)
    )
    assert {name for name, outcome in ran.items() if outcome != "passed"} == CAUSALITY_UNFIXED
    assert all(ran[name].startswith("failed") for name in CAUSALITY_UNFIXED)


# -- on a GPU, unchanged ---------------------------------------------------------

# What the GPU interpreter must import: vLLM patched with the fixes, CUDA and pytest.
GPU_PROBE = """
import json, torch, pytest
from vllm.v1.worker.gpu.sample import gumbel
print(json.dumps({"cuda": torch.cuda.is_available(),
                  "fixed": hasattr(gumbel, "_DRAFT_NOISE_SALT")}))
"""


@pytest.fixture(scope="module")
def gpu_python() -> str:
    """An interpreter with CUDA torch, the patched vLLM and pytest on its path
    (DFLASH2_GPU_PYTHON, or the one running pytest): on the device, what
    scripts/gpu/setup_device.sh leaves."""
    python = os.environ.get("DFLASH2_GPU_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", GPU_PROBE], capture_output=True, text=True)
    seen = json.loads(probe.stdout.splitlines()[-1]) if probe.returncode == 0 else {}
    if not seen.get("cuda"):
        pytest.skip(f"{python} has no CUDA torch with pytest and vLLM, or no GPU")
    if not seen.get("fixed"):
        pytest.fail(f"{python} imports a vLLM without the backport's fixes")
    return python


@pytest.mark.gpu
@pytest.mark.parametrize(
    "version,relative,select",
    [("0.28.0", PREPARE_INPUTS, None), ("0.29.0", UNBIASED, UNBIASED_TEST)],
    ids=["0.28.0-prepare-inputs", "0.29.0-drafted-resample-unbiased"],
)
def test_upstreams_own_tests_pass_unchanged_on_a_gpu(
    gpu_python: str, version: str, relative: str, select: str | None
) -> None:
    path = Path(os.environ.get("DFLASH2_UPSTREAM_TESTS", "")) / version / "tests" / relative
    if not path.exists():
        path = upstream_tests(version, relative) / "tests" / relative
    command = [gpu_python, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q",
               "-rA", str(path)] + (["-k", select] if select else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
