"""Upstream's own tests for the fixes the backport carries, on the patched 0.27.1.

* vLLM 0.28.0's tests/v1/spec_decode/test_dflash_prepare_inputs.py (the
  prepare-inputs hardening). It hard-codes CUDA; on the CPU it runs with the
  smallest change that lets it: `CPU_ADAPTATION` below, three lines, each
  required to be there exactly once. Unchanged, under the `gpu` marker.
* vLLM 0.29.0's test_rejection_sampler_utils.py::
  test_gumbel_drafted_rejection_sample_is_unbiased (the draft noise stream):
  200 000 trials through `gumbel_sample(..., is_drafting=True)` and
  0.27.1's `rejection_sample`, CUDA only, unchanged under the `gpu` marker.

The files come from the releases' source distributions (tests/upstream.py)
and run under pytest from a folder of the test cache (env.pytest_dir) with
`--noconftest`: vLLM's top-level conftest imports half of its test suite,
which these files do not use. On the CPU both the pristine and the patched
0.27.1 run the adapted file: it must fail on the first and pass on the
second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

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

# Runs in a venv interpreter: pytest from the folder given, one report per test.
RUN_PYTEST = """
import sys

sys.path.append(sys.argv[1])
import pytest
from runtime_guest import emit

outcomes = {}


class Outcomes:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            text = "" if report.passed else ": " + str(report.longrepr)[-800:]
            outcomes[report.nodeid.rsplit("::", 1)[-1]] = report.outcome + text


code = pytest.main(["-p", "no:cacheprovider", "--noconftest", "-q", *sys.argv[2:]],
                   plugins=[Outcomes()])
emit({"exit": int(code), "outcomes": outcomes})
"""


def cpu_adapted(source: str) -> str:
    for old, new in CPU_ADAPTATION:
        assert source.count(old) == 1, f"upstream's file changed: {old!r}"
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def prepare_inputs_on_cpu(snippets, pristine_python, patched_python, venv_pytest,
                          tmp_path_factory):
    upstream = upstream_tests("0.28.0", PREPARE_INPUTS) / "tests" / PREPARE_INPUTS
    adapted = tmp_path_factory.mktemp("upstream") / "test_dflash_prepare_inputs_cpu.py"
    adapted.write_text(cpu_adapted(upstream.read_text()))
    args = [str(venv_pytest), str(adapted)]
    runs = [snippets.start(python, RUN_PYTEST, args=args)
            for python in (pristine_python, patched_python)]
    return dict(zip(("pristine", "patched"), snippets.gather(runs)))


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


def test_and_fail_on_the_pristine_0_27_1(prepare_inputs_on_cpu):
    pristine = prepare_inputs_on_cpu["pristine"]
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
