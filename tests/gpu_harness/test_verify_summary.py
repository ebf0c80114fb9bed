"""The summary of `verify --gpu` on a real install reads what each step
printed and what its engines logged (scripts/gpu/verify_summary.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "verify_summary.py"
spec = importlib.util.spec_from_file_location("verify_summary", SCRIPT)
verify_summary = importlib.util.module_from_spec(spec)
# dataclasses look their module up by name.
sys.modules["verify_summary"] = verify_summary
spec.loader.exec_module(verify_summary)

PASSING = """\
$ dflash2-backport verify --gpu --python /v/bin/python
vLLM 0.27.1 at /v/lib/python3.12/site-packages/vllm (/v/bin/python)
on NVIDIA H100 80GB HBM3, bfloat16: a small Qwen3 target and DFlash2 draft, written to a temporary directory in 0.1 s; 24 prompts of token ids, 3 draft tokens per step
  pass  engine      V2 model runner, with and without the draft (started together); attention: target FLASH_ATTN (FlashAttention 3), draft FLASH_ATTN (FlashAttention 3) (41.5 s)
  pass  speculator  exactly one DFlash2Speculator (0.4 s)
  pass  lossless    24 of 24 prompts give the plain run's greedy tokens with the draft (1536 tokens) (0.4 s)
  pass  counters    drafts 948, draft tokens 2844, accepted 576 (0.0 s)
  pass  kernels     _selector_walk_kernel compiled (1 variant) and launched (0.0 s)
verified: 5 of 5 checks pass in 53 s
exit 0, wall 53.2 s
"""

FAILING = """\
$ dflash2-backport verify --gpu --python /v/bin/python
vLLM 0.27.1 at /v/lib/python3.12/site-packages/vllm (/v/bin/python)
on NVIDIA H100 80GB HBM3, bfloat16: a small Qwen3 target and DFlash2 draft, written to a temporary directory in 0.1 s; 24 prompts of token ids, 3 draft tokens per step
  FAIL  engine      the engine with the draft did not start: Model architectures ['DFlash2DraftModel'] are not supported for now (30.0 s)
  FAIL  counters    not read: the engine with the draft generated nothing (0.0 s)
failed: 2 of 2 checks (engine, counters) in 31 s
exit 2, wall 31.9 s
"""

PHASES = """\
base  10:00:05 Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']
base  10:00:20 Compiling a graph for compile range (1, 16384) takes 10.07 s
base  10:01:45 init engine (profile, create kv cache, warmup model) took 98.50 s (compilation: 12.97 s)
dflash2  10:00:06 Graph capturing finished in 1 secs, took 0.07 GiB
dflash2  10:00:07 Graph capturing finished in 2 secs, took 0.07 GiB
not a timed line
dflash2  10:02:10 init engine (profile, create kv cache, warmup model) took 120.00 s (compilation: 15.16 s)
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PASSING, ("0.27.1", "NVIDIA H100 80GB HBM3", "bfloat16", 0, 53.2, ["pass"] * 5)),
        (FAILING, ("0.27.1", "NVIDIA H100 80GB HBM3", "bfloat16", 2, 31.9, ["FAIL", "FAIL"])),
    ],
)
def test_a_step_reads_as_its_release_gpu_dtype_exit_wall_and_verdicts(text, expected):
    step = verify_summary.read_step("cold", text)
    assert (step.release, step.gpu, step.dtype, step.exit, step.wall,
            [c.verdict for c in step.checks]) == expected


def test_the_engine_line_gives_its_seconds_and_the_attention_backends():
    step = verify_summary.read_step("cold", PASSING)
    engine = step.check("engine")
    assert engine.seconds == 41.5
    assert verify_summary.ATTENTION.search(engine.detail)[1] == (
        "target FLASH_ATTN (FlashAttention 3), draft FLASH_ATTN (FlashAttention 3)")


def test_each_engine_log_gives_its_span_start_compilation_and_capture():
    starts = {e.engine: e for e in verify_summary.read_phases(PHASES)}
    assert [(e.last - e.first, e.init, e.compilation, e.graphs) for e in starts.values()] == [
        (100, 98.5, 12.97, None),
        (124, 120.0, 15.16, 3),
    ]


def test_the_summary_says_which_steps_did_not_end_as_expected(tmp_path):
    results = tmp_path / "0.27.1" / "results"
    results.mkdir(parents=True)
    (results / "verify-cold.txt").write_text(PASSING)
    (results / "verify-cold-phases.txt").write_text(PHASES)
    # A broken selector that passes is the one outcome the run exists to catch.
    (results / "verify-broken.txt").write_text(PASSING)
    (results / "verify-pristine.txt").write_text(FAILING)
    # Each engine's record, as gpu_probes.run_engine writes it.
    (results / "verify-cold-engine-draft.json").write_text(json.dumps(
        {"seconds": {"import": 6.2, "start": 40.1, "introspect": 0.4, "attention": 0.1,
                     "greedy": 0.5, "kernels": 0.0}, "errors": {}}))
    (results / "verify-pristine-engine-draft.json").write_text(json.dumps(
        {"seconds": {"import": 6.0, "start": 21.0}, "errors": {"start": "not supported"}}))
    text = verify_summary.summary(tmp_path / "0.27.1")
    assert "| cold | draft | 6.2 | 40.1 | 0.4 | 0.1 | 0.5 | 0.0 |" in text
    assert "| pristine | draft | 6.0 | 21.0 |  |  |  |  |" in text
    assert "2 of 3 steps end as expected; not: broken." in text
    assert "| cold | base | 100 | 98.5 | 12.97 |  |" in text
    assert "| pristine | no options, after `revert` | bfloat16 | 2 (2) | 31.9 | 30.0 | 0 of 2 pass |  |" in text


def test_each_committed_verify_runs_summary_is_the_one_its_result_files_make():
    runs = sorted(SCRIPT.parent.joinpath("runs").glob("verify-*/results"))
    assert runs
    for results in runs:
        run = results.parent
        assert verify_summary.summary(run) == (run / "summary.md").read_text(), run.name
