"""The DFlash2 draft's grouped convolution kernel (draft-conv-kernel), in
Triton's interpreter, on 0.27.1 and 0.26.0 as `apply` patches each.

Run through the custom op the fix registers (`torch.ops.vllm`, which on the
CPU dispatches to the launcher and the interpreter), on float32 tensors:
the interpreter rounds a bfloat16 store by truncation where a GPU rounds to
nearest, so only float32 says whether the kernel's arithmetic is right. The
cases are upstream 0.34.0's table for its own kernel
(`test_grouped_conv_triton_matches_reference`, which needs CUDA), plus a
batch with fewer rows than taps and rows laid out with a stride. The
expected values come from the plain float32 loop below, tap by tap, as the
kernel's docstring states the sum; the DFlash2 model's torch form (0.28.0's
path, what runs on the CPU and with `--only-pr`) is held to the same loop.

With `apply --only-pr`, and as 0.27.1 ships, there is no kernel and no op:
the DFlash2 model convolves in torch, as 0.28.0 does.

Upstream 0.34.0's own two tests of `_grouped_conv` run unchanged too: the
CPU one (the torch form) on both edit sets here, the CUDA one (the kernel,
float32 and bfloat16) on a GPU under the `gpu` marker. Their file does not
import on the backport (it also names `_score_edges_reference`, 0.34.0's CPU
path), so the two tests run alone under the imports they read.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_runtime_anchor_clamp import _free_names
from tests.runtime.test_runtime_upstream_fixes import RUN_PYTEST
from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

#: (batch, num_groups, group_size, block_size, taps): upstream 0.34.0's cases,
#: then one with fewer rows than taps, then one whose rows have a stride.
CASES = [
    (7, 13, 11, 5, 1),
    (7, 13, 11, 5, 3),
    (7, 13, 11, 8, 2),
    (16, 64, 16, 8, 2),
    (16, 160, 16, 8, 2),
    (1, 8, 16, 2, 4),
    (3, 32, 32, 4, 4),
]
STRIDED = 6

PROBE = """
import json, sys

import torch

from runtime_guest import emit
from vllm.model_executor.models import qwen3_dflash


def reference(hidden, delta, base, block_size, group_size):
    rows, channels = hidden.shape
    out = torch.zeros(rows, channels, dtype=torch.float32)
    for row in range(rows):
        for tap in range(base.shape[0]):
            if row % block_size < tap:
                break
            weight = base[tap] + delta[row, tap].repeat_interleave(group_size)
            out[row] += weight * hidden[row - tap]
    return out


def main(cases, strided):
    seen = {"kernel": hasattr(qwen3_dflash, "dflash2_grouped_conv"),
            "op": hasattr(torch.ops.vllm, "dflash2_grouped_conv")}
    try:
        from vllm.model_executor.models import qwen3_dflash2
    except ImportError as error:
        seen["model"] = f"ImportError: {error}"
    else:
        seen["model"] = "imported"
        seen["model_uses_kernel"] = qwen3_dflash2._conv_kernel_registered
    results = []
    for index, (batch, groups, group_size, block_size, taps) in enumerate(cases):
        generator = torch.Generator().manual_seed(index)
        rows, channels = batch * block_size, groups * group_size
        hidden = torch.randn(rows, channels + (5 if index == strided else 0),
                             generator=generator)[:, :channels]
        base = torch.randn(taps, channels, generator=generator)
        delta = torch.randn(rows, 2, taps, groups, generator=generator)[:, 1]
        expected = reference(hidden, delta, base, block_size, group_size)
        case = {"rows_strided": hidden.stride(0) != channels}
        if seen["op"]:
            got = torch.ops.vllm.dflash2_grouped_conv(hidden, delta, base, block_size, group_size)
            case["kernel_exact"] = bool(torch.equal(got, expected))
            case["kernel_max_error"] = float((got - expected).abs().max())
        if seen["model"] == "imported":
            torch_form = qwen3_dflash2._grouped_conv(
                hidden, delta, base, block_size, groups, group_size, taps)
            case["torch_form_max_error"] = float((torch_form - expected).abs().max())
        results.append(case)
    seen["cases"] = results
    emit(seen)


main(json.loads(sys.argv[1]), int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons) -> dict[str, dict]:
    names = list(edit_set_pythons)
    runs = [snippets.start(edit_set_pythons[name], PROBE, args=[json.dumps(CASES), str(STRIDED)])
            for name in names]
    return dict(zip(names, snippets.gather(runs)))


def test_apply_registers_the_kernel_as_vllm_s_custom_op(seen) -> None:
    patched = seen["patched"]
    assert (patched["kernel"], patched["op"], patched["model_uses_kernel"]) == (True, True, True)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[str(c) for c in CASES])
def test_the_kernel_sums_each_draft_block_s_taps_exactly_in_float32(seen, index) -> None:
    case = seen["patched"]["cases"][index]
    assert case["kernel_exact"], case
    assert case["rows_strided"] == (index == STRIDED)


@pytest.mark.parametrize("tree", ["only-pr", "patched"])
def test_the_torch_form_means_the_same_sum(seen, tree) -> None:
    # Inductor's fusion aside, the torch form multiplies and adds in the same
    # order; eager float32 agrees to rounding.
    errors = [case["torch_form_max_error"] for case in seen[tree]["cases"]]
    assert max(errors) < 1e-5, errors


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_without_the_fix_there_is_no_kernel_and_the_model_convolves_in_torch(seen, tree) -> None:
    found = seen[tree]
    assert (found["kernel"], found["op"]) == (False, False)
    if tree == "only-pr":
        assert found["model_uses_kernel"] is False
    else:
        assert found["model"].startswith("ImportError")


# -- upstream 0.34.0's own tests of the convolution ----------------------------

VERSION = "0.34.0"
RELATIVE = "v1/spec_decode/test_dflash2.py"
CPU_TEST = "test_grouped_conv_matches_reference"
GPU_TEST = "test_grouped_conv_triton_matches_reference"
IMPORTS = (
    "import pytest\nimport torch\n\n"
    "from vllm.model_executor.models.qwen3_dflash2 import _grouped_conv\n"
    "from vllm.platforms import current_platform\n"
)


def upstream_conv_tests(source: str) -> str:
    """Upstream's two tests, decorators and all, as its file has them, under
    `IMPORTS`: every name they read comes from there."""
    tree = ast.parse(source)
    tests = [node for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name in (CPU_TEST, GPU_TEST)]
    assert [t.name for t in tests] == [CPU_TEST, GPU_TEST]
    read = set().union(*(_free_names(t) for t in tests))
    for test in tests:
        for decorator in test.decorator_list:
            read |= {n.id for n in ast.walk(decorator) if isinstance(n, ast.Name)}
    assert read <= {"torch", "pytest", "current_platform", "_grouped_conv"}, read
    segments = []
    for test in tests:
        start = test.decorator_list[0].lineno if test.decorator_list else test.lineno
        segments.append("\n".join(source.splitlines()[start - 1:test.end_lineno]))
    return IMPORTS + "\n\n" + "\n\n\n".join(segments) + "\n"


@pytest.fixture(scope="module")
def upstream_file(tmp_path_factory) -> Path:
    upstream = upstream_tests(VERSION, RELATIVE) / "tests" / RELATIVE
    test_file = tmp_path_factory.mktemp("upstream") / "test_dflash2_grouped_conv.py"
    test_file.write_text(upstream_conv_tests(upstream.read_text()))
    return test_file


def test_the_tests_are_upstream_s_byte_for_byte(upstream_file) -> None:
    source = (upstream_tests(VERSION, RELATIVE) / "tests" / RELATIVE).read_text()
    for segment in upstream_file.read_text().removeprefix(IMPORTS).split("\n\n\n"):
        assert segment.strip("\n") in source


@pytest.mark.parametrize("tree", ["only-pr", "patched"])
def test_upstream_s_cpu_test_passes_on_the_torch_form(snippets, edit_set_pythons,
                                                      upstream_file, tree) -> None:
    ran = snippets.run(edit_set_pythons[tree], RUN_PYTEST, args=[str(upstream_file)])
    outcomes = ran["outcomes"]
    assert {name: outcomes[name] for name in outcomes if name.startswith(CPU_TEST)} == {
        f"{CPU_TEST}[5]": "passed", f"{CPU_TEST}[8]": "passed"}, ran
    # The CUDA test skips itself here: no GPU.
    assert all(o.startswith("skipped") for n, o in outcomes.items() if n.startswith(GPU_TEST))
    assert ran["exit"] == 0


@pytest.fixture(scope="module")
def gpu_python() -> str:
    """An interpreter with CUDA torch, the patched vLLM and pytest on its path
    (DFLASH2_GPU_PYTHON, or the one running pytest): on the device, what
    scripts/gpu/setup_device.sh leaves."""
    python = os.environ.get("DFLASH2_GPU_PYTHON", sys.executable)
    probe = subprocess.run(
        [python, "-c", "import torch, pytest; from vllm.model_executor.models import "
         "qwen3_dflash as m; print(torch.cuda.is_available(), "
         "hasattr(m, 'dflash2_grouped_conv'))"],
        capture_output=True, text=True,
    )
    seen = probe.stdout.split() if probe.returncode == 0 else []
    if seen[:1] != ["True"]:
        pytest.skip(f"{python} has no CUDA torch with pytest and vLLM, or no GPU")
    if seen[1:] != ["True"]:
        pytest.fail(f"{python} imports a vLLM without the convolution kernel")
    return python


@pytest.mark.gpu
def test_upstream_s_kernel_test_passes_on_a_gpu(gpu_python, tmp_path) -> None:
    source = Path(os.environ.get("DFLASH2_UPSTREAM_TESTS", "")) / VERSION / "tests" / RELATIVE
    if not source.exists():
        source = upstream_tests(VERSION, RELATIVE) / "tests" / RELATIVE
    test_file = tmp_path / "test_dflash2_grouped_conv.py"
    test_file.write_text(upstream_conv_tests(source.read_text()))
    done = subprocess.run(
        [gpu_python, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q", "-rA",
         str(test_file), "-k", GPU_TEST],
        capture_output=True, text=True, timeout=900,
    )
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "10 passed" in done.stdout
