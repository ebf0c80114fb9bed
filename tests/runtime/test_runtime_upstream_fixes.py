"""Upstream's own tests of the fixes the backport carries, from the source
distribution of the release that has each, run against vLLM 0.27.1 as it
ships, as `apply --only-pr` patches it and as `apply` patches it.

They run with pytest in the testkit venvs (env.testkit_env), without
upstream's conftest.py (`--noconftest`): it imports half of vLLM's test
suite, and the files run here need only what they import themselves.

* vLLM 0.33.0's tests of the draft's max_position_embeddings (#57941), the
  ones that need no Hugging Face Hub ("override" in their names), unchanged.
* vLLM 0.28.0's tests/v1/spec_decode/test_dflash_prepare_inputs.py (the
  prepare-inputs guards). It hard-codes CUDA; on the CPU it runs with the
  smallest change that lets it: `CPU_ADAPTATION` below, three lines, each
  required to be there exactly once. Unchanged, under the `gpu` marker.
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

#: The draft max_position_embeddings fix (#57941), 0.33.0: the helper's
#: tests, which need no Hub ("override" in their names).
MAX_POSITION = ("0.33.0", "config/test_speculative_draft_max_position_embeddings.py", "override")
#: What 0.27.1 fails of them: its helper raises a draft whatever its RoPE.
UNFIXED_FAILURES = {
    f"test_override_skips_other_rope_types[rope_parameters{i}]" for i in range(4)
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
    assert len(outcomes) == 10
    assert set(outcomes.values()) == {"passed"}, outcomes


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_upstream_s_max_position_tests_fail_where_the_fix_is_missing(
    max_position, tree: str
) -> None:
    outcomes = max_position[tree]
    assert set(outcomes) == set(max_position["patched"])
    assert {name for name, outcome in outcomes.items() if outcome != "passed"} == (
        UNFIXED_FAILURES
    )
    assert {outcomes[name] for name in UNFIXED_FAILURES} == {"failed"}


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

# Runs in a testkit interpreter: one report per test.
RUN_PYTEST = """
import sys

import pytest
from runtime_guest import emit

outcomes = {}


class Outcomes:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            text = "" if report.passed else ": " + str(report.longrepr)[-800:]
            outcomes[report.nodeid.rsplit("::", 1)[-1]] = report.outcome + text


code = pytest.main(["-p", "no:cacheprovider", "--noconftest", "-q", *sys.argv[1:]],
                   plugins=[Outcomes()])
emit({"exit": int(code), "outcomes": outcomes})
"""


def cpu_adapted(source: str) -> str:
    for old, new in CPU_ADAPTATION:
        assert source.count(old) == 1, f"upstream's file changed: {old!r}"
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def prepare_inputs_on_cpu(snippets, edit_set_pythons, tmp_path_factory):
    upstream = upstream_tests("0.28.0", PREPARE_INPUTS) / "tests" / PREPARE_INPUTS
    adapted = tmp_path_factory.mktemp("upstream") / "test_dflash_prepare_inputs_cpu.py"
    adapted.write_text(cpu_adapted(upstream.read_text()))
    runs = [snippets.start(edit_set_pythons[tree], RUN_PYTEST, args=[str(adapted)])
            for tree in ("pristine", "only-pr", "patched")]
    return dict(zip(("pristine", "only-pr", "patched"), snippets.gather(runs)))


UPSTREAM_PREPARE_TESTS = [
    "test_prepare_dflash_inputs_excludes_rejected_context_suffix",
    "test_prepare_dflash_inputs_never_writes_the_null_block",
]


def test_upstream_0_28_0s_prepare_inputs_tests_pass_on_the_patched_0_27_1(
    prepare_inputs_on_cpu,
):
    patched = prepare_inputs_on_cpu["patched"]
    assert patched["outcomes"] == dict.fromkeys(UPSTREAM_PREPARE_TESTS, "passed"), patched
    assert patched["exit"] == 0


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_and_fail_where_the_guards_are_missing(prepare_inputs_on_cpu, tree):
    pristine = prepare_inputs_on_cpu[tree]
    assert sorted(pristine["outcomes"]) == UPSTREAM_PREPARE_TESTS
    assert all(o.startswith("failed") for o in pristine["outcomes"].values()), pristine
    assert pristine["exit"] == 1


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
