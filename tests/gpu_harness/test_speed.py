"""The speed benchmark's parts that need no GPU: bfloat16 writing, the
8B-shaped checkpoints' construction (checked against a numpy model of greedy
drafting), the statistics and verdicts, and the scripts' plans and tables
(scripts/gpu/speed.py, scripts/gpu/kernel_speed.py)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from dflash2_backport.verification.checkpoints import (  # noqa: E402
    bf16_bits,
    read_safetensors_header,
    save_safetensors_bf16,
)

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"gpu_{name}", ROOT / "scripts" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"gpu_{name}"] = module
    spec.loader.exec_module(module)
    return module


speed = _load("speed")
# the modules speed.py runs with, found beside it
import speed_engine  # noqa: E402
import speed_plan as plan  # noqa: E402
import speed_report  # noqa: E402
import speed_stats  # noqa: E402
from speed_models import (  # noqa: E402
    SPEED_SHAPES,
    draft_tensors,
    parameter_count,
    residual_scale,
    target_tensors,
    write_speed_models,
)

kernel_speed = _load("kernel_speed")
spells = _load("spells")


# --------------------------------------------------------------------------
# bfloat16
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value, bits", [
    (1.0, 0x3F80),
    (-2.0, 0xC000),
    (0.0, 0x0000),
    (1 + 2**-8, 0x3F80),             # halfway, ties to the even 0x3F80
    (1 + 3 * 2**-8, 0x3F82),         # halfway, ties to the even 0x3F82
    (1 + 2**-8 + 2**-20, 0x3F81),    # past halfway: up
    (1 + 2**-8 - 2**-20, 0x3F80),    # short of halfway: down
    (3.4028234663852886e38, 0x7F80),  # float32's largest rounds to inf
    (float("inf"), 0x7F80),
])
def test_float32_rounds_to_the_nearest_bfloat16_ties_to_even(value, bits):
    assert int(bf16_bits(np.array([value], np.float32))[0]) == bits


def test_a_nan_stays_a_nan_in_bfloat16():
    nan_with_high_payload = np.array([0x7FFFFFFF], np.uint32).view(np.float32)
    out = int(bf16_bits(nan_with_high_payload)[0])
    assert out & 0x7F80 == 0x7F80 and out & 0x007F


def _read_bf16(path: Path) -> dict:
    header = read_safetensors_header(path)
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    found = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "BF16"
        start, end = entry["data_offsets"]
        raw = np.frombuffer(data[8 + length + start:8 + length + end], "<u2")
        found[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])
    return found


def test_bf16_tensors_are_written_one_at_a_time_in_the_safetensors_layout(tmp_path):
    asked = []

    def fill(name):
        asked.append(name)
        return {"b": np.array([[1.0, -2.0, 0.5]], np.float32),
                "a": np.array([0x3F80, 0x4000], np.uint16)}[name]

    path = tmp_path / "m.safetensors"
    save_safetensors_bf16(path, {"b": (1, 3), "a": (2,)}, fill)
    assert asked == ["a", "b"]
    tensors = _read_bf16(path)
    assert tensors["a"].tolist() == [1.0, 2.0]
    assert tensors["b"].tolist() == [[1.0, -2.0, 0.5]]
    assert read_safetensors_header(path)["b"]["data_offsets"] == [4, 10]


def test_a_tensor_of_another_shape_than_its_header_is_refused(tmp_path):
    with pytest.raises(ValueError, match="shape"):
        save_safetensors_bf16(tmp_path / "m.safetensors", {"a": (2, 2)},
                              lambda name: np.zeros(4, np.float32))


# --------------------------------------------------------------------------
# The 8B-shaped checkpoints
# --------------------------------------------------------------------------

def test_the_8b_target_has_qwen3_8bs_parameter_count():
    shapes, _ = target_tensors(0, SPEED_SHAPES["8b"])
    assert parameter_count(shapes) == 8_190_735_360


def test_the_8b_drafts_fc_reads_every_target_layer_it_names():
    s = SPEED_SHAPES["8b"]
    shapes, _ = draft_tensors(1, s)
    assert shapes["fc.weight"] == (4096, 5 * 4096)
    assert all(0 <= i < s["target_layers"] - 1 for i in s["target_layer_ids"])


@pytest.mark.parametrize("layers, reference, scale", [
    (2, 2, 0.3),
    (36, 2, 0.3 / math.sqrt(18)),
    (5, 1, 0.3 / math.sqrt(5)),
])
def test_the_residual_shrinks_so_that_the_summed_noise_stays(layers, reference, scale):
    assert residual_scale(layers, reference) == pytest.approx(scale)


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed")
    paths = write_speed_models(out, "mini")
    s = SPEED_SHAPES["mini"]
    return {"s": s, "target": _read_bf16(Path(paths["target"]) / "model.safetensors"),
            "draft": _read_bf16(Path(paths["dflash2"]) / "model.safetensors"),
            "prompts": json.loads(Path(paths["prompts"]).read_text()),
            "draft_config": json.loads((Path(paths["dflash2"]) / "config.json").read_text())}


def _unit_rms(x):
    return x / np.sqrt(np.mean(x * x))


def _target_next(m, token):
    """The target as a bigram model: the embedding through the output head,
    the layers' small noise left out (the GPU run measures with it)."""
    t = m["target"]
    return int(np.argmax(t["lm_head.weight"] @ _unit_rms(t["model.embed_tokens.weight"][token])))


def _draft_walk(m, anchor):
    """The draft at its mask slots, the layers' noise left out: the head's
    top-k candidates, then the selector's greedy walk from the anchor."""
    t, d, s = m["target"], m["draft"], m["s"]
    hidden = _unit_rms(t["model.embed_tokens.weight"][s["mask_token"]])
    unary = t["lm_head.weight"] @ hidden
    candidates = np.argsort(-unary)[:s["top_k"]]
    gate = d["candidate_selector.hidden_projection.weight"] @ hidden
    predecessor = d["candidate_selector.predecessor_codebook"]
    successor = d["candidate_selector.successor_codebook"]
    path, previous = [], anchor
    for _ in range(s["block_size"] - 1):
        scores = unary[candidates] + successor[candidates] @ (predecessor[previous] * gate)
        previous = int(candidates[np.argmax(scores)])
        path.append(previous)
    return path


def _mean_acceptance_length(m, anchor, steps):
    drafts = accepted = 0
    for _ in range(steps):
        proposal, previous, taken = _draft_walk(m, anchor), anchor, 0
        for token in proposal:
            if token != _target_next(m, previous):
                break
            previous, taken = token, taken + 1
        anchor = _target_next(m, previous)  # the target's own token after the last accepted
        drafts, accepted = drafts + 1, accepted + taken
    return 1 + accepted / drafts


TARGET_CYCLES = {110: 111, 111: 112, 112: 113, 113: 114, 114: 115, 115: 110,
                 120: 121, 121: 122, 122: 120}


@pytest.mark.parametrize("token, successor", sorted(TARGET_CYCLES.items()))
def test_the_targets_greedy_successor_follows_its_two_cycles(mini, token, successor):
    assert _target_next(mini, token) == successor


@pytest.mark.parametrize("anchor, path", [
    (110, [111, 112, 113, 114, 115, 120, 121, 110, 111, 112, 113, 114, 115, 120, 121]),
    (120, [121, 110, 111, 112, 113, 114, 115, 120, 121, 110, 111, 112, 113, 114, 115]),
    (122, [110, 111, 112, 113, 114, 115, 120, 121, 110, 111, 112, 113, 114, 115, 120]),
])
def test_the_drafts_walk_takes_its_wrong_edges(mini, anchor, path):
    assert _draft_walk(mini, anchor) == path


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_mask_slot_still_has_every_cycle_token_among_its_candidates(mini, seed):
    # Noise of RMS 0.6 against the unit-RMS stream: more than the draft's
    # layers add in total (their sum is one 0.3-scaled layer's).
    t, s = mini["target"], mini["s"]
    mask = _unit_rms(t["model.embed_tokens.weight"][s["mask_token"]])
    noise = np.random.default_rng(seed).standard_normal(s["hidden"]).astype(np.float32)
    hidden = _unit_rms(mask + 0.6 * noise)
    candidates = np.argsort(-(t["lm_head.weight"] @ hidden))[:s["top_k"]]
    assert set(TARGET_CYCLES) <= set(candidates.tolist())


@pytest.mark.parametrize("regime, anchor, length", [
    ("high", 110, 6.0),  # a1..a5 accepted, b0 rejected: 6 tokens a step
    ("low", 120, 1.5),   # 2 tokens from b0, 1 from b2
])
def test_greedy_drafting_reaches_each_regimes_acceptance(mini, regime, anchor, length):
    assert _mean_acceptance_length(mini, anchor, steps=12) == pytest.approx(length)
    assert {p[-1] for p in mini["prompts"][regime]} == {anchor}


def test_the_prompts_stay_out_of_the_cycles_until_their_last_token(mini):
    for prompts in mini["prompts"].values():
        assert len(prompts) == 32
        assert all(len(p) == 64 and not set(p[:-1]) & set(TARGET_CYCLES) for p in prompts)


def test_the_draft_config_names_the_spread_target_layers(mini):
    dflash = mini["draft_config"]["dflash_config"]
    assert dflash["target_layer_ids"] == [0, 2, 3]
    assert mini["draft"]["fc.weight"].shape == (256, 3 * 256)
    assert mini["draft_config"]["block_size"] == 16


def test_a_written_checkpoint_is_kept(tmp_path):
    paths = write_speed_models(tmp_path, "mini")
    weights = Path(paths["target"]) / "model.safetensors"
    weights.write_bytes(b"kept")
    write_speed_models(tmp_path, "mini")
    assert weights.read_bytes() == b"kept"


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def test_a_median_interval_of_identical_repetitions_is_that_value():
    assert speed_stats.median_interval([[5.0, 5.0], [5.0]]) == {
        "point": 5.0, "lo": 5.0, "hi": 5.0}


def test_rounds_that_disagree_give_an_interval_that_spans_them():
    # Each round is steady, but the two differ: a resample that draws the
    # first round twice has median 100, one that draws the second twice 200.
    interval = speed_stats.median_interval([[100.0] * 3, [200.0] * 3])
    assert (interval["lo"], interval["point"], interval["hi"]) == (100.0, 150.0, 200.0)


@pytest.mark.parametrize("ours_base, ours_spec, up_base, up_spec, ratio, verdict", [
    # (250 / 100) / (200 / 100)
    ([100.0] * 5, [250.0] * 5, [100.0] * 5, [200.0] * 5, 1.25, "PASS"),
    # (180 / 100) / (200 / 100)
    ([100.0] * 5, [180.0] * 5, [100.0] * 5, [200.0] * 5, 0.9, "FAIL"),
    # (300 / 150) / (100 / 50)
    ([150.0] * 4, [300.0] * 4, [50.0] * 4, [100.0] * 4, 1.0, "PASS"),
])
def test_the_ratio_of_speedups_of_steady_engines(ours_base, ours_spec, up_base, up_spec,
                                                  ratio, verdict):
    found = speed_stats.ratio_of_speedups([ours_base] * 2, [ours_spec] * 2,
                                          [up_base] * 2, [up_spec] * 2)
    assert found["point"] == pytest.approx(ratio)
    assert (found["lo"], found["hi"]) == (pytest.approx(ratio), pytest.approx(ratio))
    assert found["verdict"] == verdict


def test_noisy_engines_give_an_interval_wider_than_3_percent_and_no_pass():
    rng = np.random.default_rng(1)

    def noisy(level):
        return [list(level * (1 + 0.2 * rng.standard_normal(6))) for _ in range(2)]

    found = speed_stats.ratio_of_speedups(noisy(100), noisy(200), [[100.0] * 6] * 2,
                                          [[200.0] * 6] * 2)
    assert found["half_width"] > 0.03
    assert found["verdict"] == "INCONCLUSIVE"


def test_speedups_that_swap_places_between_rounds_are_inconclusive():
    # Within each round the engines are steady and the interval of the
    # pooled repetitions alone would be 0.97 to 1.03 wide at most; the rounds
    # disagree by 8 %, each in the other direction.
    steady = [[100.0] * 8] * 2
    found = speed_stats.ratio_of_speedups(steady, [[196.0] * 8, [204.0] * 8],
                                          steady, [[204.0] * 8, [196.0] * 8])
    assert found["point"] == pytest.approx(1.0)
    assert found["lo"] < 0.97 and found["verdict"] == "INCONCLUSIVE"


def test_one_round_says_nothing_of_the_spread_between_rounds():
    found = speed_stats.ratio_of_speedups([[100.0] * 8], [[250.0] * 8],
                                          [[100.0] * 8] * 2, [[250.0] * 8] * 2)
    assert (found["lo"], found["hi"], found["rounds"]) == (
        pytest.approx(1.0), pytest.approx(1.0), 1)
    assert found["verdict"] == "INCONCLUSIVE"


# A machine with slow spells: every DFlash2 cycle of either version runs at
# one of these rates, both cycles of a pair at the same one.
SPELLS = [100.0, 60.0, 95.0, 70.0, 100.0, 65.0]


def test_pairs_cancel_a_slow_spell_that_each_version_meets_alike():
    steady = [[100.0] * 6] * 2
    unpaired = speed_stats.ratio_of_speedups(steady, [SPELLS] * 2, steady, [SPELLS] * 2)
    assert unpaired["verdict"] == "INCONCLUSIVE"
    paired = speed_stats.paired_ratio_of_speedups([[1.0] * 6] * 2, [[1.0] * 6] * 2)
    assert (paired["point"], paired["lo"], paired["hi"], paired["verdict"]) == (
        1.0, 1.0, 1.0, "PASS")


@pytest.mark.parametrize("base_pairs, spec_pairs, point, verdict", [
    ([[1.0] * 6] * 2, [[0.95] * 6] * 2, 0.95, "FAIL"),
    ([[1.02] * 6] * 2, [[1.02] * 6] * 2, 1.0, "PASS"),  # the targets differ alike
    ([[1.0] * 6], [[1.0] * 6], 1.0, "INCONCLUSIVE"),   # one round
    ([[1.0] * 6] * 2, [[0.9, 1.1] * 3] * 2, 1.0, "INCONCLUSIVE"),
])
def test_paired_speedup_ratio_is_the_median_spec_pair_over_the_median_base_pair(
        base_pairs, spec_pairs, point, verdict):
    found = speed_stats.paired_ratio_of_speedups(base_pairs, spec_pairs)
    assert (found["point"], found["verdict"]) == (pytest.approx(point), verdict)


@pytest.mark.parametrize("point, lo, hi, verdict", [
    (1.00, 0.980, 1.020, "PASS"),
    (0.99, 0.965, 1.015, "FAIL"),          # narrow, but reaches below 0.97
    (0.95, 0.940, 0.960, "FAIL"),
    (1.00, 0.960, 1.040, "INCONCLUSIVE"),  # +-4%
    (1.10, 1.000, 1.200, "INCONCLUSIVE"),  # above 0.97, yet +-9%
    (1.00, 0.971, 1.029, "PASS"),
])
def test_a_verdict_needs_a_narrow_interval_above_97_percent(point, lo, hi, verdict):
    assert speed_stats.verdict({"point": point, "lo": lo, "hi": hi, "rounds": 2}) == verdict


def test_a_speedup_interval_is_the_ratio_of_medians():
    # medians 300 and 120
    found = speed_stats.speedup_interval([[100.0, 120.0, 130.0]], [[300.0, 290.0, 310.0]])
    assert found["point"] == pytest.approx(300.0 / 120.0)
    assert found["lo"] <= found["point"] <= found["hi"]


# --------------------------------------------------------------------------
# scripts/gpu/speed.py
# --------------------------------------------------------------------------

@pytest.mark.parametrize("round_number, order", [
    (1, ["base", "up_base", "dflash2", "up_dflash2"]),
    (2, ["up_base", "base", "up_dflash2", "dflash2"]),
    (3, ["base", "up_base", "dflash2", "up_dflash2"]),
])
def test_rounds_alternate_versions_and_flip_who_goes_first(round_number, order):
    assert plan.round_order(round_number) == order


MODELS = {"target": "T", "dflash2": "D", "prompts": "P"}


@pytest.mark.parametrize("name, draft", [("base", None), ("up_base", None),
                                         ("dflash2", "D"), ("up_dflash2", "D")])
def test_each_engine_runs_the_8b_target_in_bf16_with_graphs_for_its_batch_sizes(name, draft):
    kwargs = plan.engine_kwargs(name, MODELS)
    assert (kwargs["model"], kwargs["dtype"], kwargs["enforce_eager"]) == ("T", "bfloat16", False)
    # 64 prompt tokens, 128 output tokens and one block of 16 past them
    assert kwargs["max_model_len"] == 208
    # one request and 32, as themselves and as 16-token verification steps
    assert kwargs["compilation_config"]["cudagraph_capture_sizes"] == [1, 16, 32, 512]
    assert kwargs["attention_config"] == {"backend": "TRITON_ATTN"}
    assert kwargs["enable_prefix_caching"] is False
    spec = kwargs.get("speculative_config")
    assert (spec or {}).get("model") == draft
    if spec:
        assert spec["num_speculative_tokens"] == 15


def test_the_weights_kv_and_a_margin_fit_in_the_memory_the_engine_asks_for():
    s = SPEED_SHAPES["8b"]
    target, _ = target_tensors(0, s)
    draft, _ = draft_tensors(1, s)
    weights = 2 * (parameter_count(target) + parameter_count(draft))
    h200 = 139 * 2**30
    kwargs = plan.engine_kwargs("dflash2", MODELS)
    assert weights + kwargs["kv_cache_memory_bytes"] + 8 * 2**30 < (
        kwargs["gpu_memory_utilization"] * h200)
    # 32 requests of 208 tokens, 36 target and 5 draft layers of 8 KV heads of 128
    kv_needed = 32 * 208 * (36 + 5) * 2 * 8 * 128 * 2
    assert kwargs["kv_cache_memory_bytes"] > 2 * kv_needed


LOG = """\
INFO 12-03 10:00:01 [model_runner.py:330] Model loading took 15.26 GiB and 12.500000 seconds
INFO 12-03 10:00:40 [monitor.py:40] torch.compile took 30.25 s in total
INFO 12-03 10:00:52 [monitor.py:40] torch.compile and initial profiling/warmup run together took 8.50 s in total
INFO 12-03 10:01:00 [model_runner.py:792] Graph capturing finished in 6 secs, took 0.52 GiB
INFO 12-03 10:01:01 [model_runner.py:792] Graph capturing finished in 2 secs, took 0.10 GiB
INFO 12-03 10:01:02 [core.py:356] init engine (profile, create kv cache, warmup model) took 61.02 s (compilation: 38.75 s)
"""


def test_an_engines_start_up_figures_are_read_off_its_log():
    assert speed_report.engine_timings(LOG) == {"load_s": 12.5, "compile_s": 38.8, "capture_s": 8.0,
                                         "init_engine_s": 61.0}


def _result(engine, round_number, reps, drafts=0.0, accepted=0.0):
    cells = {cell: {"reps": reps, "counters": [
        {"num_drafts": drafts, "num_accepted_tokens": accepted}] * len(reps)}
        for cell in plan.CELLS}
    return {"engine": engine, "round": round_number, "cells": cells,
            "timings": {"startup_s": 80.0, "measure_s": 50.0}}


def _write_results(run: Path, ours_spec: float, up_spec: float) -> None:
    (run / "results").mkdir(parents=True)
    for round_number in (1, 2):
        for engine, reps, drafts, accepted in (
                ("base", [100.0, 101.0, 99.0], 0.0, 0.0),
                ("up_base", [100.0, 100.0, 100.0], 0.0, 0.0),
                ("dflash2", [ours_spec] * 3, 10.0, 50.0),
                ("up_dflash2", [up_spec] * 3, 10.0, 50.0)):
            (run / "results" / f"round{round_number}-{engine}.json").write_text(
                json.dumps(_result(engine, round_number, reps, drafts, accepted)))


def test_the_report_tables_every_cell_with_acceptance_and_a_verdict(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    code = speed.main(["report", "--run", str(tmp_path), "--copy-to", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert code == 0
    assert text.count("speedup ratio 0.27.1 / 0.28.0: 1.000") == 4
    assert text.count(": PASS") == 4
    # 1 + 50 accepted / 10 drafts
    assert text.count(" 6.00 ") == 8
    assert "0.27.1: DFlash2 2.50 [" in text and "(expected >= 2x: met)" in text
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    row = summary["high_c1"]["rows"]["0.27.1"]
    assert row["reps"] == 6
    # the base median stays within 99 and 101 however it is resampled
    assert 250 / 101 <= row["speedup"]["lo"] <= row["speedup"]["hi"] <= 250 / 99


def test_the_report_gives_each_rounds_own_ratio_beside_the_pooled_one(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    # round 3: the DFlash2 engines alone, 0.27.1's 10 % slower than 0.28.0's
    for engine, rate in (("dflash2", 225.0), ("up_dflash2", 250.0)):
        (tmp_path / "results" / f"round3-{engine}.json").write_text(
            json.dumps(_result(engine, 3, [rate] * 3, 10.0, 50.0)))
    speed.main(["report", "--run", str(tmp_path)])
    text = capsys.readouterr().out
    # rounds 1 and 2 from their own no-spec medians (100 / 100), round 3
    # from the pooled ones (100 / 100)
    assert text.count("each round's own: round 1 1.000, round 2 1.000, round 3 0.900") == 4


@pytest.mark.parametrize("name, override, reps", [
    ("base", None, 8), ("up_base", None, 8), ("dflash2", None, 16), ("up_dflash2", None, 16),
    ("dflash2", 3, 3), ("base", 12, 12),
])
def test_a_dflash2_engine_repeats_more_than_a_base_engine_unless_told(name, override, reps):
    assert plan.engine_reps(name, override) == reps


# The committed runs, as the GPU printed their tables: FlashAttention 3
# against 0.28.0 (fa3), the newest release (three-versions), the newest
# release against the convolution kernel (conv-kernel) and against its
# launcher (launcher). The report must still make the same tables of their
# result files: with `--order-unbalanced` as they were printed, and with the
# pairs order-balanced as it judges them now; and each run's summary.md
# shows both.
RUNS = ROOT / "scripts" / "gpu" / "runs"


@pytest.fixture(scope="module")
def published_report(tmp_path_factory):
    """published_report(run, *options) -> what the report prints for a
    committed run: made once a run and options, since each of its cells
    reads the same report."""
    made: dict[tuple, str] = {}

    def report(name: str, *options: str) -> str:
        if (name, options) not in made:
            run = tmp_path_factory.mktemp(name)
            shutil.copytree(RUNS / name / "results", run / "results")
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                speed.main(["report", "--run", str(run), *options])
            made[name, options] = printed.getvalue()
        return made[name, options]

    return report


FA3 = ("fa3", "0.28.0", "auto (vLLM chooses); vLLM's logs: FLASH_ATTN, FA3")
NEWEST = ("three-versions", "0.34.0", "TRITON_ATTN; vLLM's logs: TRITON_ATTN")
KERNEL = ("conv-kernel", "0.34.0", "TRITON_ATTN; vLLM's logs: TRITON_ATTN")
LAUNCHER = ("launcher", "0.34.0", "TRITON_ATTN; vLLM's logs: TRITON_ATTN")


@pytest.mark.parametrize("run, cell, published, balanced", [
    (FA3, "high acceptance, c1", "1.030 [1.014, 1.056] (+-2.0%): PASS",
     "1.028 [1.003, 1.055] (+-2.5%): PASS"),
    (FA3, "high acceptance, b32", "0.987 [0.970, 1.030] (+-3.1%): INCONCLUSIVE",
     "0.998 [0.989, 1.011] (+-1.1%): PASS"),
    (FA3, "low acceptance, c1", "1.027 [1.014, 1.036] (+-1.1%): PASS",
     "1.030 [1.013, 1.040] (+-1.3%): PASS"),
    (FA3, "low acceptance, b32", "0.998 [0.989, 1.006] (+-0.9%): PASS",
     "0.997 [0.992, 1.006] (+-0.7%): PASS"),
    (NEWEST, "high acceptance, c1", "0.992 [0.968, 1.006] (+-1.9%): FAIL",
     "0.987 [0.965, 1.011] (+-2.3%): FAIL"),
    (NEWEST, "high acceptance, b32", "1.001 [0.990, 1.012] (+-1.1%): PASS",
     "0.999 [0.974, 1.021] (+-2.3%): PASS"),
    (NEWEST, "low acceptance, c1", "0.973 [0.953, 0.994] (+-2.1%): FAIL",
     "0.975 [0.945, 0.992] (+-2.4%): FAIL"),
    (NEWEST, "low acceptance, b32", "0.987 [0.967, 1.013] (+-2.4%): FAIL",
     "0.994 [0.967, 1.010] (+-2.2%): FAIL"),
    (KERNEL, "high acceptance, c1", "0.988 [0.957, 1.012] (+-2.8%): FAIL",
     "0.985 [0.942, 1.022] (+-4.0%): INCONCLUSIVE"),
    (KERNEL, "high acceptance, b32", "0.999 [0.977, 1.008] (+-1.5%): PASS",
     "0.995 [0.985, 1.004] (+-1.0%): PASS"),
    (KERNEL, "low acceptance, c1", "0.989 [0.974, 1.015] (+-2.1%): PASS",
     "0.989 [0.974, 1.019] (+-2.3%): PASS"),
    (KERNEL, "low acceptance, b32", "0.985 [0.976, 0.994] (+-0.9%): PASS",
     "0.980 [0.972, 0.999] (+-1.4%): PASS"),
    (LAUNCHER, "high acceptance, c1", "1.000 [0.991, 1.005] (+-0.7%): PASS",
     "1.000 [0.991, 1.004] (+-0.7%): PASS"),
    (LAUNCHER, "high acceptance, b32", "1.017 [0.962, 1.037] (+-3.7%): INCONCLUSIVE",
     "0.998 [0.995, 1.003] (+-0.4%): PASS"),
    (LAUNCHER, "low acceptance, c1", "0.992 [0.983, 0.997] (+-0.7%): PASS",
     "0.994 [0.983, 0.999] (+-0.8%): PASS"),
    (LAUNCHER, "low acceptance, b32", "1.000 [0.994, 1.006] (+-0.6%): PASS",
     "1.000 [0.998, 1.001] (+-0.1%): PASS"),
], ids=lambda value: value[0] if isinstance(value, tuple) else None)
def test_a_committed_run_still_reports_its_published_table(published_report, run, cell,
                                                           published, balanced):
    name, upstream, backend = run
    for options, label, line in (
            (("--order-unbalanced",), "cycles paired", published),
            ((), "cycles paired, order balanced", balanced)):
        text = published_report(name, *options)
        section = text.split(f"== {cell} ")[1].split("\n\n")[0]
        assert f"speedup ratio 0.27.1 / {upstream} ({label}): {line}" in section
        assert f"attention backend: {backend}" in text
    (row,) = [x for x in (RUNS / name / "summary.md").read_text().splitlines()
              if x.startswith(f"| {cell.replace(' acceptance, ', '_')} |")]
    as_summarised = [line.replace("+-", "±").replace("): ", ") ") for line in (balanced,
                                                                             published)]
    assert row.split(" | ")[-2:] == [as_summarised[0], as_summarised[1] + " |"]


# Speed runs only: a run of `verify --gpu` has a summary of its own
# (verify_summary.py, tested in test_verify_summary.py).
COMMITTED_RUNS = sorted(path.name for path in RUNS.iterdir()
                        if (path / "results").is_dir() and (path / "run.json").is_file())


@pytest.mark.parametrize("name", COMMITTED_RUNS)
def test_each_committed_runs_summary_is_the_one_its_result_files_make(name, tmp_path):
    run = tmp_path / name
    shutil.copytree(RUNS / name, run)
    (run / "summary.md").unlink()
    assert speed.main(["summary", "--run", str(run)]) == 0
    assert (run / "summary.md").read_text() == (RUNS / name / "summary.md").read_text()


@pytest.mark.parametrize("run, gpu, torch_build, day, passing", [
    ("fa3", "NVIDIA H100", "2.13.0+cu130", "2026-12-05", "4 of 4 cells pass against 0.28.0."),
    ("three-versions", "NVIDIA H100", "2.11.0+cu130", "2026-12-05",
     "1 of 4 cells pass against 0.34.0."),
    ("conv-kernel", "NVIDIA H200", "2.11.0+cu130", "2026-12-05",
     "3 of 4 cells pass against 0.34.0."),
    ("launcher", "NVIDIA H100", "2.11.0+cu130", "2026-12-06",
     "4 of 4 cells pass against 0.34.0."),
])
def test_each_committed_runs_summary_names_its_card_torch_day_and_verdicts(
        run, gpu, torch_build, day, passing):
    text = (RUNS / run / "summary.md").read_text()
    for line in (f"- GPU: {gpu}", f"- torch: {torch_build}", f"- date: {day}", passing):
        assert line in text.splitlines(), line


def test_a_summary_takes_the_card_from_the_result_files_before_the_runs_own_record(tmp_path):
    _write_results(tmp_path, 250.0, 250.0)
    (tmp_path / "run.json").write_text(json.dumps({"gpu": "recorded apart"}))
    assert speed.main(["summary", "--run", str(tmp_path)]) == 0
    assert "- GPU: recorded apart" in (tmp_path / "summary.md").read_text()
    for path in (tmp_path / "results").glob("*.json"):
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "gpu": "NVIDIA B200"}))
    assert speed.main(["summary", "--run", str(tmp_path)]) == 0
    assert "- GPU: NVIDIA B200" in (tmp_path / "summary.md").read_text()


def test_summary_check_fails_where_the_summary_is_not_what_the_files_make(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    assert speed.main(["summary", "--run", str(tmp_path), "--check"]) == 1
    assert speed.main(["summary", "--run", str(tmp_path)]) == 0
    assert speed.main(["summary", "--run", str(tmp_path), "--check"]) == 0
    with (tmp_path / "summary.md").open("a") as summary:
        summary.write("edited by hand\n")
    assert speed.main(["summary", "--run", str(tmp_path), "--check"]) == 1
    assert "not what" in capsys.readouterr().out


def test_a_slower_speculator_on_0271_fails_the_report(tmp_path, capsys):
    _write_results(tmp_path, 200.0, 250.0)
    assert speed.main(["report", "--run", str(tmp_path)]) == 1
    assert capsys.readouterr().out.count(": FAIL") == 4


def test_the_report_without_upstream_says_what_it_lacks(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    for path in (tmp_path / "results").glob("*up_*.json"):
        path.unlink()
    assert speed.main(["report", "--run", str(tmp_path)]) == 1
    assert "both versions' base and DFlash2 figures needed" in capsys.readouterr().out


def test_a_run_refuses_an_engine_it_does_not_know(tmp_path):
    with pytest.raises(SystemExit):
        speed.main(["run", "--run", str(tmp_path), "--round", "1", "--engines", "base,fast"])


def test_a_run_without_models_says_how_to_write_them(tmp_path):
    with pytest.raises(SystemExit, match="speed.py models"):
        speed.main(["run", "--run", str(tmp_path), "--round", "1"])


# --------------------------------------------------------------------------
# scripts/gpu/kernel_speed.py
# --------------------------------------------------------------------------

@pytest.mark.parametrize("argv, batches", [
    ([], [1, 32, 256]),
    (["--batches", "8"], [8]),
    (["--batches", "1,4,"], [1, 4]),
])
def test_kernel_speed_reads_its_batch_sizes(argv, batches):
    assert kernel_speed.parse_args(argv).batches == batches


@pytest.mark.parametrize("argv", [["--batches", "a,2"], ["--batches", "0"], ["--batches", ""]])
def test_kernel_speed_refuses_batches_it_cannot_run(argv):
    with pytest.raises(SystemExit):
        kernel_speed.parse_args(argv)


def test_kernel_speed_tables_ours_against_upstream_per_batch_and_mode():
    timings = {"cache": {"32": {"ours": {"launch": 9.0, "graph": 3.0},
                                "upstream": {"launch": 10.0, "graph": 2.0}},
                         "1": {"ours": {"launch": 8.0, "graph": 2.0},
                               "upstream": {"launch": 8.0, "graph": 2.0}}}}
    lines = kernel_speed.format_table(timings).splitlines()
    assert lines[1].split() == ["cache", "1", "launch", "8.00", "8.00", "1.000"]
    assert lines[3].split() == ["cache", "32", "launch", "9.00", "10.00", "0.900"]
    assert lines[4].split() == ["cache", "32", "graph", "3.00", "2.00", "1.500"]


def test_kernel_speed_without_the_bundles_files_says_where_they_come_from(tmp_path):
    with pytest.raises(SystemExit, match="_gpu_bundle.py"):
        kernel_speed.main(["--kernels", str(tmp_path)])


def _fake_trees(tmp_path: Path, init_source, names=("vt", "vt28")) -> tuple[Path, list[str]]:
    """A run with the mini models and vllm trees whose package runs
    `init_source(tree)` on import (`vtnew`, when named, is the newest
    release's, 0.34.0 by its METADATA); the arguments that point `run` at
    them. The newest tree is named even when absent, so that a machine's
    own /tmp/vtnew stays out."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "models.json").write_text(json.dumps(write_speed_models(tmp_path, "mini")))
    for name in names:
        package = tmp_path / name / "vllm"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(init_source(tmp_path / name))
    if "vtnew" in names:
        _metadata(tmp_path / "vtnew", "0.34.0")
    return run, ["--run", str(run), "--tree-0271", str(tmp_path / "vt"),
                 "--tree-0280", str(tmp_path / "vt28"), "--tree-new", str(tmp_path / "vtnew"),
                 "--site", str(tmp_path / "site"), "--min-engine-s", "0", "--time-limit", "120"]


def _metadata(where: Path, version: str) -> None:
    """A vllm-*.dist-info/METADATA as a wheel installs it."""
    info = where / f"vllm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")


def test_an_engine_that_cannot_start_is_recorded_and_the_round_goes_on(tmp_path, capsys):
    out = tmp_path / "out"
    run, where = _fake_trees(
        tmp_path, lambda tree: f"raise RuntimeError('{tree.name} cannot start')\n")
    code = speed.main(["run", *where, "--round", "2", "--engines", "dflash2,up_base",
                       "--copy-to", str(out)])
    printed = capsys.readouterr().out
    assert code == 1
    assert printed.index("[round 2 dflash2] exit 1") < printed.index("[round 2 up_base] exit 1")
    assert "vt cannot start" in printed and "vt28 cannot start" in printed
    # each version's engines share one compile cache, across rounds too
    # and what is copied out is one archive of the run so far
    assert [p.name for p in out.iterdir()] == ["speed-run.tgz"]
    with tarfile.open(out / "speed-run.tgz") as archive:
        names = set(archive.getnames())
        for engine, cache in (("dflash2", "cache-0.27.1"), ("up_base", "cache-0.28.0")):
            result = json.load(archive.extractfile(f"results/round2-{engine}.json"))
            assert result["exit"] == 1
            assert result["cache_root"] == str(run / "vllm-cache" / cache)
            assert f"logs/round2-{engine}.log" in names


@pytest.mark.parametrize("text, cpus", [
    ("3", {3}), ("0-3", {0, 1, 2, 3}), ("0-1,8,10-11", {0, 1, 8, 10, 11}),
])
def test_an_engines_cores_are_read_as_taskset_writes_them(text, cpus):
    assert speed.parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-", "0,,2", "-1", "3-1", "0,3-1"])
def test_cores_that_name_none_or_nonsense_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        speed.parse_cpus(text)


def test_every_engine_starts_on_the_cores_and_threads_it_was_given(tmp_path):
    # The engines' vllm records what its process was given, then stops.
    core = min(os.sched_getaffinity(0))
    _, where = _fake_trees(tmp_path, lambda tree: (
        "import os, pathlib\n"
        f"pathlib.Path({str(tree)!r}, 'seen').write_text("
        "f\"{sorted(os.sched_getaffinity(0))} {os.environ.get('OMP_NUM_THREADS')}\")\n"
        "raise RuntimeError('stop here')\n"))
    speed.main(["run", *where, "--round", "1", "--engines", "base,up_dflash2",
                "--cpus", str(core), "--torch-threads", "1"])
    for name in ("vt", "vt28"):
        assert (tmp_path / name / "seen").read_text() == f"[{core}] 1"


def test_cores_the_machine_does_not_give_are_refused_before_any_engine_starts(tmp_path):
    (tmp_path / "models.json").write_text("{}")
    missing = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(SystemExit, match=rf"--cpus: cores \[{missing}\] are not"):
        speed.main(["run", "--run", str(tmp_path), "--round", "1", "--cpus", str(missing)])
    assert not (tmp_path / "logs").exists()


def test_a_version_with_one_engine_so_far_shows_its_figure_and_no_speedup(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    (tmp_path / "results" / "round1-up_dflash2.json").unlink()
    (tmp_path / "results" / "round2-up_dflash2.json").unlink()
    assert speed.main(["report", "--run", str(tmp_path)]) == 1
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("0.28.0")]
    # version, the no-spec median [lo, hi], then '-' for DFlash2, speedup and length
    assert [row[:4] + row[4:7] for row in rows] == [
        ["0.28.0", "100", "[100,", "100]", "-", "-", "-"]] * 4


def test_host_usage_counts_the_cpu_time_and_collections_between_two_readings():
    before = speed_engine.host_usage()
    spin_until = time.process_time() + 0.2
    while time.process_time() < spin_until:
        pass
    gc.collect()
    delta = speed_engine.usage_delta(speed_engine.host_usage(), before)
    assert delta["cpu_s"] >= 0.2 and delta["gc"] >= 1


def test_the_report_gives_each_process_its_cycles_host_figures(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    path = tmp_path / "results" / "round1-dflash2.json"
    result = json.loads(path.read_text())
    result["cycles"] = [
        {"wall_s": 1.0, "cpu_s": 1.0, "involuntary": 10, "voluntary": 500, "gc": 0,
         "steal_s": 0.0},
        {"wall_s": 4.0, "cpu_s": 2.0, "involuntary": 30, "voluntary": 700, "gc": 2,
         "steal_s": 0.5},
        {"wall_s": 3.0, "cpu_s": 0.3, "involuntary": 20, "voluntary": 900, "gc": 1,
         "steal_s": 0.25}]
    result["host"] = {"cpus": 16, "torch_threads": 16, "main_cpu": [5],
                      "threads_on_main_cpu": [1, 40]}
    path.write_text(json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("round 1 dflash2:"))
    # the CPU share is the median of each cycle's own, not of the sums
    assert line.endswith("; 16 cores, 16 torch threads, main thread on core 5 (1 of 40 "
                         "threads there alone); a cycle 3.00 s, CPU 0.50 of wall, 20 "
                         "involuntary and 700 voluntary switches, 1 GC runs, 0.25 s stolen "
                         "by the hypervisor")


@pytest.mark.parametrize("first_line, ticks", [
    ("cpu  10 0 20 3000 5 0 1 250 0 0", 250),
    ("cpu  10 0 20 3000 5 0 1", 0),  # a kernel that does not count it
])
def test_stolen_time_is_the_steal_column_of_proc_stat_in_seconds(tmp_path, first_line, ticks):
    stat = tmp_path / "stat"
    stat.write_text(first_line + "\ncpu0 1 2 3 4 5 6 7 8\n")
    assert speed_engine.stolen_seconds(str(stat)) == ticks / os.sysconf("SC_CLK_TCK")


# A vllm whose LLM answers at once and notes when each generate call began
# and how many tokens it asked for, with a thread of its own that notes its
# cores; and a torch with only what the engine asks of it after its warm-up.
FAKE_VLLM = """
import os, pathlib, threading, time
CALLS = pathlib.Path({tree!r}, "calls")
FAIL_AFTER = {fail_after}
class SamplingParams:
    def __init__(self, max_tokens=None, **kwargs):
        self.max_tokens = max_tokens
class _Request:
    def __init__(self):
        self.outputs = [type("Out", (), {{"token_ids": [1, 2, 3]}})()]
def _note_cores():
    # Whole or not at all: the thread dies wherever it is when the engine
    # exits, and a note truncated then would read empty.
    note = pathlib.Path({tree!r}, "helper-cores")
    while True:
        staged = note.with_name(f"helper-cores.{{os.getpid()}}")
        staged.write_text(str(sorted(os.sched_getaffinity(0))))
        os.replace(staged, note)
        time.sleep(0.01)
def _meet_partner():
    # While it starts, an engine notes so beside its tree and waits a while
    # for the other tree's note: whether the two starts overlapped.
    mine = pathlib.Path({tree!r}, "starting")
    mine.write_text("")
    wait = float(os.environ.get("FAKE_START_WAIT_S", "0"))
    end = time.monotonic() + wait
    others = lambda: [p for p in mine.parent.parent.glob("*/starting") if p != mine]
    while wait and not others() and time.monotonic() < end:
        time.sleep(0.05)
    pathlib.Path({tree!r}, "met-partner").write_text(str(bool(others())))
class LLM:
    def __init__(self, **kwargs):
        self.calls = 0
        _meet_partner()
        threading.Thread(target=_note_cores, daemon=True).start()
    def get_metrics(self):
        return []
    def generate(self, prompts, params, use_tqdm=False):
        self.calls += 1
        if FAIL_AFTER is not None and self.calls > FAIL_AFTER:
            raise RuntimeError("the engine died")
        if self.calls > int(os.environ.get("FAKE_HANG_AFTER") or 10**9):
            time.sleep(600)
        with open(CALLS, "a") as calls:
            calls.write(f"{{time.monotonic()}} {{params.max_tokens}}\\n")
        pathlib.Path({tree!r}, "main-cores").write_text(str(sorted(os.sched_getaffinity(0))))
        time.sleep(0.002)
        return [_Request() for _ in prompts]
"""
CALLS_PER_CYCLE = sum(plan.C1_REQUESTS if plan.LOADS[c.split("_")[1]] == 1 else 1
                      for c in plan.CELLS)
# Paired, each cell is primed by one more call.
CALLS_PER_PAIRED_CYCLE = CALLS_PER_CYCLE + len(plan.CELLS)


def _fake_vllm_source(tree: Path, fail_after: dict | None = None) -> str:
    """FAKE_VLLM for a package in `tree`, with the fake torch beside it."""
    torch = tree / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text(
        "__version__ = '2.99.0+fake'\n"
        "class cuda:\n    get_device_name = staticmethod(lambda: 'Fake GPU')\n"
        "def get_num_threads():\n    return 1\n"
        "class _Tensor:\n    def add_(self, other):\n        return self\n"
        "def ones(size):\n    return _Tensor()\n")
    return FAKE_VLLM.format(tree=str(tree), fail_after=(fail_after or {}).get(tree.name))


def _fake_engines(tmp_path: Path, fail_after: dict | None = None,
                  names=("vt", "vt28")) -> list[str]:
    return _fake_trees(tmp_path, lambda tree: _fake_vllm_source(tree, fail_after), names)[1]


def _owners(tmp_path: Path, calls_per_cycle: int = CALLS_PER_CYCLE) -> list[str]:
    """Which tree made each generate call after the warm-ups (a paired
    engine's own, then one more when both are up), in time order; a call
    for the primer's few tokens is marked with a `*`."""
    calls = []
    for name in ("vt", "vt28"):
        lines = (tmp_path / name / "calls").read_text().splitlines()
        for line in lines[(plan.WARMUPS + 1) * calls_per_cycle:]:
            stamp, tokens = line.split()
            calls.append((float(stamp), name + ("*" if tokens == str(plan.PRIME_TOKENS)
                                                else "")))
    return [name for _, name in sorted(calls)]


def test_paired_engines_take_turns_cell_by_cell(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--paired", "--reps", "4"])
    assert code == 0, capsys.readouterr().out
    # who goes first flips from cell to cell and from cycle to cycle; each
    # engine primes (*) just before its timed calls: two for a c1 cell, one
    # for a b32 cell
    a, b, a_, b_ = "vt", "vt28", "vt*", "vt28*"
    c1_ab, c1_ba = [a_, a, a, b_, b, b], [b_, b, b, a_, a, a]
    b32_ab, b32_ba = [a_, a, b_, b], [b_, b, a_, a]
    cycle_1 = c1_ab + b32_ba + c1_ab + b32_ba
    cycle_2 = c1_ba + b32_ab + c1_ba + b32_ab
    assert _owners(tmp_path) == (cycle_1 + cycle_2) * 2
    for engine, first in (("dflash2", [True, False, True, False]),
                          ("up_dflash2", [False, True, False, True])):
        result = json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json").read_text())
        assert result["paired"] and result["exit"] == 0
        for i, cell in enumerate(plan.CELLS):
            # and each repetition notes whether its engine ran it first
            starts = first[i:] + first[:i]
            assert result["cells"][cell]["order"] == [
                "first" if f else "second" for f in starts]


def test_each_result_names_the_gpu_the_torch_and_the_day_it_was_measured_on(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--engines", "base", "--reps", "1"])
    assert code == 0, capsys.readouterr().out
    result = json.loads((tmp_path / "run" / "results" / "round1-base.json").read_text())
    assert (result["gpu"], result["torch"]) == ("Fake GPU", "2.99.0+fake")
    assert result["date"] == time.strftime("%Y-%m-%d", time.gmtime())


def test_a_pairs_engines_start_together(tmp_path, capsys, monkeypatch):
    # each waits, starting, up to 20 s for the other to be starting too:
    # one started after the other is up would never meet it
    monkeypatch.setenv("FAKE_START_WAIT_S", "20")
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--paired", "--reps", "1"])
    assert code == 0, capsys.readouterr().out
    assert [(tmp_path / name / "met-partner").read_text() for name in ("vt", "vt28")] == [
        "True", "True"]


def test_a_pair_without_the_time_left_for_its_start_is_skipped_whole(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--paired", "--min-engine-s", "200"])
    assert code == 1
    assert "[round 1 dflash2,up_dflash2] skipped: 120 s of the time limit left" in (
        capsys.readouterr().out)
    assert not list((tmp_path / "run" / "results").iterdir())


def test_a_round_of_some_cells_warms_up_and_times_those_alone(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "3", "--engines", "up_dflash2,dflash2",
                       "--paired", "--reps", "3", "--cells", "low_c1"])
    assert code == 0, capsys.readouterr().out
    # two c1 calls a warm-up cycle; then each cycle is the one cell, primed,
    # and who goes first flips from cycle to cycle
    a, b, a_, b_ = "vt28", "vt", "vt28*", "vt*"
    first, second = [a_, a, a, b_, b, b], [b_, b, b, a_, a, a]
    assert _owners(tmp_path, plan.C1_REQUESTS) == first + second + first
    for engine, order in (("up_dflash2", ["first", "second", "first"]),
                          ("dflash2", ["second", "first", "second"])):
        result = json.loads((tmp_path / "run" / "results" / f"round3-{engine}.json").read_text())
        assert list(result["cells"]) == ["low_c1"]
        assert result["cells"]["low_c1"]["order"] == order
        assert len(result["cycles"]) == 3


@pytest.mark.parametrize("cells", ["low_c2", "", "low_c1,low_c1", "low_c1,high"])
def test_a_round_refuses_cells_the_plan_does_not_have(tmp_path, capsys, cells):
    (tmp_path / "models.json").write_text("{}")
    with pytest.raises(SystemExit):
        speed.main(["run", "--run", str(tmp_path), "--round", "1", "--cells", cells])
    assert "--cells: some of ['high_c1', 'high_b32', 'low_c1', 'low_b32']" in (
        capsys.readouterr().err)


def test_a_paired_engine_that_dies_ends_its_pair_and_its_partner_exits_cleanly(tmp_path,
                                                                                capsys):
    # up_dflash2 dies in the first cell of the second cycle, where it goes
    # first, once it has primed
    where = _fake_engines(tmp_path, {"vt28": (plan.WARMUPS + 1) * CALLS_PER_CYCLE
                                     + CALLS_PER_PAIRED_CYCLE + 1})
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--paired", "--reps", "4"])
    printed = capsys.readouterr().out
    assert code == 1 and "the engine died" in printed
    results = {engine: json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json")
                                  .read_text()) for engine in ("dflash2", "up_dflash2")}
    assert results["dflash2"]["exit"] == 0 and results["up_dflash2"]["exit"] == 1
    # and dflash2 is not asked for that cell: one repetition of each
    assert [len(results["dflash2"]["cells"][cell]["reps"]) for cell in plan.CELLS] == [1] * 4
    assert len(results["dflash2"]["cycles"]) == 1


def test_a_run_cut_short_keeps_every_paired_cycle_it_finished(tmp_path):
    # Both engines hang at their first request of the second cycle, as if the
    # time limit ended there; the run itself is then killed.
    where = _fake_engines(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_HANG_AFTER=str((plan.WARMUPS + 1) * CALLS_PER_CYCLE
                                               + CALLS_PER_PAIRED_CYCLE))
    run = subprocess.Popen(
        [sys.executable, str(Path(speed.__file__)), "run", *where, "--round", "1",
         "--paired", "--engines", "dflash2,up_dflash2", "--reps", "4",
         "--copy-to", str(out)], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    archive = out / speed_report.ARCHIVE
    try:
        deadline = time.monotonic() + 60
        while not archive.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    with tarfile.open(archive) as kept:
        results = {engine: json.load(kept.extractfile(f"results/round1-{engine}.json"))
                   for engine in ("dflash2", "up_dflash2")}
    for result in results.values():
        assert [len(result["cells"][cell]["reps"]) for cell in plan.CELLS] == [1] * 4


def test_a_main_core_pins_each_engines_main_thread_alone_after_its_warm_up(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    cores = sorted(os.sched_getaffinity(0))
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--paired", "--reps", "1", "--main-cpu", str(cores[-1])])
    assert code == 0, capsys.readouterr().out
    for name, engine in (("vt", "dflash2"), ("vt28", "up_dflash2")):
        # the thread that ran the last cell is pinned; vLLM's own are not
        assert (tmp_path / name / "main-cores").read_text() == str([cores[-1]])
        assert (tmp_path / name / "helper-cores").read_text() == str(cores)
        result = json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json").read_text())
        assert result["host"]["main_cpu"] == [cores[-1]]
        # of its threads (the main one, the fake's and any numpy makes),
        # the main one alone is on that core
        alone, threads = result["host"]["threads_on_main_cpu"]
        assert threads >= 2 and alone == (1 if len(cores) > 1 else threads)


def test_a_main_core_outside_the_engines_cores_is_refused(tmp_path):
    (tmp_path / "models.json").write_text("{}")
    core = min(os.sched_getaffinity(0))
    with pytest.raises(SystemExit, match=rf"--main-cpu: core {core + 1} is not among"):
        speed.main(["run", "--run", str(tmp_path), "--round", "1", "--cpus", str(core),
                    "--main-cpu", str(core + 1)])


@pytest.mark.parametrize("engines", ["dflash2,base", "base,up_base,dflash2",
                                     "dflash2,dflash2"])
def test_paired_engines_must_come_as_one_kind_of_each_version(tmp_path, engines):
    (tmp_path / "models.json").write_text("{}")
    with pytest.raises(SystemExit, match="--paired: engines go in pairs"):
        speed.main(["run", "--run", str(tmp_path), "--round", "1", "--paired",
                    "--engines", engines])


def _write_paired(run: Path, ours_spec: list[float], up_spec: list[float],
                  paired_rounds=(1, 2), order: list[str] | None = None) -> None:
    """Two rounds of the four engines; `order`, where given, is whether our
    DFlash2 engine ran each repetition first or second, in every cell."""
    (run / "results").mkdir(parents=True)
    for round_number in (1, 2):
        for engine, reps in (("base", [100.0] * 6), ("up_base", [100.0] * 6),
                             ("dflash2", ours_spec), ("up_dflash2", up_spec)):
            result = _result(engine, round_number, reps, 10.0, 50.0)
            result["paired"] = round_number in paired_rounds
            if order and engine == "dflash2":
                for cell in plan.CELLS:
                    result["cells"][cell]["order"] = order
            (run / "results" / f"round{round_number}-{engine}.json").write_text(
                json.dumps(result))


@pytest.mark.parametrize("ours_spec, paired_rounds, line", [
    (SPELLS, (1, 2), "speedup ratio 0.27.1 / 0.28.0 (cycles paired, order balanced): "
                     "1.000 [1.000, 1.000] (+-0.0%): PASS"),
    ([0.9 * rate for rate in SPELLS], (1, 2),
     "speedup ratio 0.27.1 / 0.28.0 (cycles paired, order balanced): "
     "0.900 [0.900, 0.900] (+-0.0%): FAIL"),
    # a round run unpaired: the rounds are judged unpaired, the spells stay in
    (SPELLS, (1,), "speedup ratio 0.27.1 / 0.28.0: 1.000 ["),
])
def test_the_report_judges_paired_rounds_by_their_pairs(tmp_path, capsys, ours_spec,
                                                        paired_rounds, line):
    _write_paired(tmp_path, ours_spec, SPELLS, paired_rounds)
    speed.main(["report", "--run", str(tmp_path)])
    lines = [text for text in capsys.readouterr().out.splitlines()
             if text.startswith("speedup ratio")]
    assert len(lines) == 4 and all(text.startswith(line) for text in lines)


@pytest.mark.parametrize("order, ours_spec, line", [
    # ours faster when it runs first, slower when second, by the same 10%
    (["first", "second"] * 3, [110.0, 90.0] * 3,
     "  DFlash2 pairs, ours / 0.28.0's: 1.100 with ours first, 0.900 with ours second "
     "(6 and 6 pairs); the two figures of a pair correlate nan"),
    # the pairs meet the spells together: their figures move as one
    (["second", "first"] * 3, SPELLS,
     "  DFlash2 pairs, ours / 0.28.0's: 1.000 with ours first, 1.000 with ours second "
     "(6 and 6 pairs); the two figures of a pair correlate 1.00"),
])
def test_the_report_shows_how_the_pairs_depend_on_who_ran_first(tmp_path, capsys, order,
                                                                 ours_spec, line):
    _write_paired(tmp_path, ours_spec, SPELLS if ours_spec == SPELLS else [100.0] * 6,
                  order=order)
    speed.main(["report", "--run", str(tmp_path)])
    lines = [text for text in capsys.readouterr().out.splitlines()
             if text.startswith("  DFlash2 pairs")]
    assert lines == [line] * 4


@pytest.mark.parametrize("pairs, order, coupled", [
    # ours 5% faster first and 5% slower second around a ratio of 1
    ([1.05, 1 / 1.05] * 2, ["first", "second"] * 2, [1.0, 1.0]),
    ([0.9 / 1.05, 0.9 * 1.05], ["second", "first"], [0.9]),
    ([1.1, 0.9, 1.2], ["first", "second", "first"], [0.99 ** 0.5]),  # a round cut short
    ([1.1], ["first"], []),                                          # a round of one cycle
    ([1.1, 0.9], [], [1.1, 0.9]),                                    # no order recorded
])
def test_a_pair_where_ours_ran_first_is_coupled_with_the_next_where_it_ran_second(
        pairs, order, coupled):
    assert speed_report.balance_order(pairs, order) == pytest.approx(coupled)


@pytest.mark.parametrize("ratio, line", [
    (1.0, "1.000 [1.000, 1.000] (+-0.0%): PASS"),
    (0.95, "0.950 [0.950, 0.950] (+-0.0%): FAIL"),
])
def test_an_effect_of_who_runs_first_drops_out_of_the_ratio(tmp_path, capsys, ratio, line):
    # Each pair of the GPU's spells, ours 8% faster when it runs first and
    # 8% slower when second: alone, the pairs fall in two clusters.
    ours = [rate * ratio * (1.08 if i % 2 == 0 else 1 / 1.08) for i, rate in enumerate(SPELLS)]
    _write_paired(tmp_path, ours, SPELLS, order=["first", "second"] * 3)
    speed.main(["report", "--run", str(tmp_path)])
    lines = [text for text in capsys.readouterr().out.splitlines()
             if text.startswith("speedup ratio")]
    label = "speedup ratio 0.27.1 / 0.28.0 (cycles paired, order balanced)"
    assert lines == [f"{label}: {line}"] * 4


def test_a_round_of_one_cell_adds_to_that_cell_alone(tmp_path, capsys):
    # two full rounds where ours is 10% slower, then a third round of the
    # DFlash2 pair at low_c1 only, where it is not
    _write_paired(tmp_path, [0.9 * rate for rate in SPELLS], SPELLS)
    for engine in ("dflash2", "up_dflash2"):
        result = _result(engine, 3, SPELLS, 10.0, 50.0)
        result["cells"] = {"low_c1": result["cells"]["low_c1"]}
        result["paired"] = True
        (tmp_path / "results" / f"round3-{engine}.json").write_text(json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    header, text = capsys.readouterr().out.split("\n", 1)
    # files from before the backend was a choice ran Triton's
    assert header == "attention backend: TRITON_ATTN"
    sections = {}
    for block in text.split("\n\n")[:4]:
        regime, load = re.match(r"== (\w+) acceptance, (\w+) ", block).groups()
        sections[f"{regime}_{load}"] = block
    for cell, reps, rounds in (("high_c1", "12 in 2", "round 1 0.900, round 2 0.900"),
                               ("high_b32", "12 in 2", "round 1 0.900, round 2 0.900"),
                               ("low_c1", "18 in 3",
                                "round 1 0.900, round 2 0.900, round 3 1.000"),
                               ("low_b32", "12 in 2", "round 1 0.900, round 2 0.900")):
        assert sections[cell].splitlines()[2].endswith(reps), cell
        assert f"  each round's own: {rounds}" in sections[cell].splitlines(), cell


@pytest.mark.parametrize("paired", [["--paired"], []])
def test_a_host_profile_names_each_versions_functions_from_vllm_on(tmp_path, capsys, paired):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--engines", "dflash2,up_dflash2",
                       "--reps", "1", "--host-profile", *paired])
    assert code == 0, capsys.readouterr().out
    results = tmp_path / "run" / "results"
    for engine in ("dflash2", "up_dflash2"):
        profile = json.loads((results / f"round1-{engine}.json").read_text())["host_profile"]
        # the fake LLM answers three tokens a request
        assert profile["tokens"] == 3 * plan.HOST_PROFILE_REQUESTS
        in_vllm = [(f["function"].split(":")[0], f["calls"]) for f in profile["functions"]
                   if f["function"].endswith("(generate)") and str(tmp_path) not in f["function"]
                   and "scripts/gpu" not in f["function"]]
        # the tree's own directory is cut off, so both versions' names match
        assert in_vllm == [("vllm/__init__.py", plan.HOST_PROFILE_REQUESTS)]
        assert "(generate)" in (results / profile["file"]).read_text()


def test_the_report_sets_the_versions_host_functions_side_by_side_by_their_difference(
        tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    profiles = {
        "dflash2": [("vllm/v1/worker/gpu_model_runner.py:2100(execute_model)", 0.010),
                    ("vllm/v1/core/sched/scheduler.py:300(schedule)", 0.004),
                    ("vllm/v1/sample/sampler.py:50(forward)", 0.003),
                    ("~:0(<function Event.synchronize at 0x7fc8b431bf60>)", 0.002),
                    ("triton/runtime/jit.py:600(<lambda>)", 0.0005),
                    ("triton/runtime/jit.py:720(<lambda>)", 0.0005)],
        "up_dflash2": [("vllm/v1/worker/gpu_model_runner.py:2250(execute_model)", 0.008),
                       ("vllm/v1/core/sched/scheduler.py:310(schedule)", 0.004),
                       ("~:0(<function Event.synchronize at 0x7fa8deb13f60>)", 0.0025),
                       ("triton/runtime/jit.py:600(<lambda>)", 0.001)],
    }
    for engine, functions in profiles.items():
        path = tmp_path / "results" / f"round2-{engine}.json"
        result = json.loads(path.read_text())
        result["host_profile"] = {"tokens": 1000, "elapsed_s": 0.5, "functions": [
            {"function": f, "calls": 1, "own_s": own, "with_callees_s": own}
            for f, own in functions]}
        path.write_text(json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    printed = capsys.readouterr().out
    lines = printed[printed.index("host profile, round 2"):].splitlines()
    assert [line.split() for line in lines[1:]] == [
        ["3.0", "/", "-", "vllm/v1/sample/sampler.py(forward)"],
        ["10.0", "/", "8.0", "vllm/v1/worker/gpu_model_runner.py(execute_model)"],
        # a built-in is matched without the address each process gives it
        ["2.0", "/", "2.5", "~(<function", "Event.synchronize>)"],
        # two functions of one name in one file are summed
        ["1.0", "/", "1.0", "triton/runtime/jit.py(<lambda>)"],
        ["4.0", "/", "4.0", "vllm/v1/core/sched/scheduler.py(schedule)"]]
    assert lines[0].endswith("(0.27.1 / 0.28.0; all: 500 / 500):")


def test_an_engine_that_dies_is_noticed_while_a_process_it_started_holds_its_pipe(tmp_path):
    # The engine forks a child that keeps every descriptor, the reply pipe's
    # too, then dies before it is ready: end of file never comes.
    _, where = _fake_trees(tmp_path, lambda tree: (
        "import os, pathlib, time\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(600)\n"
        "    os._exit(0)\n"
        f"pathlib.Path({str(tree)!r}, 'child').write_text(str(child))\n"
        "raise RuntimeError('dies before it is ready')\n"))
    limit = where.index("--time-limit")
    where[limit + 1] = "3600"
    script = Path(speed.__file__)
    try:
        finished = subprocess.run(
            [sys.executable, str(script), "run", *where, "--round", "1", "--paired",
             "--engines", "dflash2,up_dflash2"],
            capture_output=True, text=True, timeout=120)
    finally:
        for name in ("vt", "vt28"):
            pid_file = tmp_path / name / "child"
            if pid_file.is_file():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert finished.returncode == 1
    # both started together, and each one's death is noticed
    assert "[round 1 dflash2] exit 1" in finished.stdout
    assert "[round 1 up_dflash2] exit 1" in finished.stdout
    assert "dies before it is ready" in finished.stdout


STAMPS = [i / 64 for i in range(256)]  # 4 s of iterations, 1/64 s apart


@pytest.mark.parametrize("times, window_spread", [
    # a slow second after a fast one: the quarter-second windows keep it
    ([1.0 if int(t) % 2 == 0 else 2.0 for t in STAMPS], 1 / 3),
    # fast and slow iterations in turn: every window averages them away
    ([1.0 if i % 2 == 0 else 2.0 for i in range(len(STAMPS))], 0.0),
])
def test_spells_tell_spells_from_noise_by_their_windows(times, window_spread):
    found = spells.spread(times, STAMPS)
    assert found["spread"] == pytest.approx(1 / 3)
    assert found["window_spread"] == pytest.approx(window_spread, abs=1e-12)
    assert found["windows"] == 16


def test_a_spell_that_outlasts_its_windows_correlates_them():
    times = [1.0 if int(t) % 2 == 0 else 2.0 for t in STAMPS]
    # windows 1 1 1 1 2 2 2 2 ...: twelve of fifteen neighbours are equal
    assert spells.spread(times, STAMPS)["window_lag1"] > 0.4


def _fake_cores(monkeypatch, seconds_of):
    """timed_on answers from `seconds_of(core, its nth run)`, at once."""
    runs: dict[int, int] = {}

    def timed_on(core):
        runs[core] = runs.get(core, -1) + 1
        return seconds_of(core, runs[core])

    monkeypatch.setattr(spells, "timed_on", timed_on)


def test_cores_of_lasting_speeds_give_their_medians_and_no_spells(monkeypatch):
    speeds = {0: 1e-3, 1: 1e-3, 2: 1.5e-3, 3: 2e-3}
    _fake_cores(monkeypatch, lambda core, n: speeds[core])
    found = spells.run_cores(0.2, [0, 1, 2, 3])
    assert found["cores"] == [1, 3]
    assert found["per_core_ms"] == {"0": 1.0, "1": 1.0, "2": 1.5, "3": 2.0}
    assert found["per_core_spread"] == pytest.approx(np.std([1, 1, 1.5, 2]) / 1.25)
    assert found["b_over_a"] == pytest.approx(2.0)
    assert found["same_core_sd"] == found["across_cores_sd"] == 0.0


@pytest.mark.parametrize("spell_of, cores_own", [
    # every 14th run, counted over both cores (a's nth run is the 2nth,
    # b's the one after), starts a slow or fast spell of the machine's: a
    # run on b shares it with the run on a just before
    (lambda core, n: (2 * n + (core == 3)) // 14 % 2, False),
    # each core's spells at their own pace: runs side by side often differ
    (lambda core, n: n // (7 if core == 1 else 11) % 2, True),
])
def test_spells_of_each_core_part_runs_on_two_cores_that_the_machines_spells_do_not(
        monkeypatch, spell_of, cores_own):
    _fake_cores(monkeypatch, lambda core, n: 1e-3 * (1.5 if spell_of(core, n) else 1.0))
    found = spells.run_cores(0.2, [0, 1, 2, 3])
    assert (found["across_cores_sd"] > 1.5 * found["same_core_sd"]) is cores_own


def test_the_core_check_needs_two_cores():
    with pytest.raises(SystemExit, match="two cores or more"):
        spells.run_cores(0.2, [5])


def test_spells_runs_as_a_script_from_any_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    finished = subprocess.run(
        [sys.executable, str(Path(spells.__file__).resolve()), "--cores", "--seconds", "0.2",
         "--out", str(tmp_path / "cores.json")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    if len(os.sched_getaffinity(0)) >= 2:
        assert finished.returncode == 0, finished.stderr
        assert json.loads((tmp_path / "cores.json").read_text())["pairs"] > 0
    else:
        assert "two cores or more" in finished.stderr


# --------------------------------------------------------------------------
# scripts/gpu/speed.py: the newest release, venvs and the attention backend
# --------------------------------------------------------------------------

A, B, C = "closure", "up", "new"


@pytest.mark.parametrize("round_number, order", [
    # rotated: each version first, second and third once in three rounds
    (1, [A, B, C]), (2, [B, C, A]), (3, [C, A, B]),
    # then reversed, so that over six rounds every order runs once
    (4, [C, B, A]), (5, [A, C, B]), (6, [B, A, C]),
    (7, [A, B, C]),
])
def test_three_versions_rotate_round_by_round(round_number, order):
    assert plan.version_order(round_number, (A, B, C)) == order


@pytest.mark.parametrize("round_number, order", [(1, [A, B]), (2, [B, A]), (3, [A, B])])
def test_two_versions_alternate_as_they_always_did(round_number, order):
    assert plan.version_order(round_number, (A, B)) == order
    assert plan.round_order(round_number, (A, B)) == plan.round_order(round_number)


def test_in_three_versions_rounds_each_engine_runs_once_and_no_version_always_leads():
    rounds = [plan.round_order(n, (A, B, C)) for n in range(1, 7)]
    for names in rounds:
        # every engine once, the no-speculation engines first
        assert sorted(names) == sorted(plan.ENGINES)
        assert [plan.ENGINES[n][1] for n in names] == [None] * 3 + ["dflash2"] * 3
    # each version leads once in every three rounds, and each runs just
    # before each other one as often as just after it over six
    firsts = [names[0] for names in rounds]
    assert sorted(firsts[:3]) == sorted(firsts[3:]) == ["base", "new_base", "up_base"]
    orders = {tuple(plan.version_order(n, (A, B, C))) for n in range(1, 7)}
    assert len(orders) == 6


@pytest.mark.parametrize("backend, attention_config, draft_backend", [
    (None, {"backend": "TRITON_ATTN"}, "TRITON_ATTN"),  # the default, as before
    ("TRITON_ATTN", {"backend": "TRITON_ATTN"}, "TRITON_ATTN"),
    ("FLASH_ATTN", {"backend": "FLASH_ATTN"}, "FLASH_ATTN"),
    ("auto", None, None),                                # vLLM chooses, for both
])
@pytest.mark.parametrize("name", ["dflash2", "new_dflash2", "up_base"])
def test_an_engines_attention_backend_is_named_for_target_and_draft_or_left_to_vllm(
        name, backend, attention_config, draft_backend):
    kwargs = (plan.engine_kwargs(name, MODELS) if backend is None
              else plan.engine_kwargs(name, MODELS, backend))
    assert kwargs.get("attention_config") == attention_config
    spec = kwargs.get("speculative_config")
    if plan.ENGINES[name][1]:
        assert spec.get("attention_backend") == draft_backend
        assert (spec["model"], spec["num_speculative_tokens"]) == ("D", 15)
    else:
        assert spec is None


@pytest.mark.parametrize("log, seen", [
    ("INFO 12-04 [cuda.py:426] Using AttentionBackendEnum.TRITON_ATTN backend.\n"
     "INFO 12-04 [cuda.py:426] Using AttentionBackendEnum.TRITON_ATTN backend.\n",
     ["TRITON_ATTN"]),
    ("INFO 12-04 [cuda.py:487] Using FLASH_ATTN attention backend out of potential "
     "backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'].\n"
     "INFO 12-04 [flash_attn.py:867] Using FlashAttention version 3\n", ["FLASH_ATTN", "FA3"]),
    ("INFO 12-04 [cuda.py:549] Using backend FLASH_ATTN for vit attention\n", []),
])
def test_the_attention_backend_vllm_took_is_read_off_its_log(log, seen):
    assert speed_report.attention_seen(log) == seen


def _engines_run(printed: str) -> list[str]:
    return re.findall(r"^\[round \d+ (\w+)\] exit", printed, re.M)


@pytest.mark.parametrize("names, engines", [
    # no newest tree: the four engines of every run before
    (("vt", "vt28"), ["base", "up_base", "dflash2", "up_dflash2"]),
    (("vt", "vt28", "vtnew"),
     ["base", "up_base", "new_base", "dflash2", "up_dflash2", "new_dflash2"]),
])
def test_a_round_runs_the_newest_release_only_when_its_tree_is_there(tmp_path, capsys, names,
                                                                   engines):
    where = _fake_engines(tmp_path, names=names)
    code = speed.main(["run", *where, "--round", "1", "--reps", "1"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert _engines_run(printed) == engines
    results = tmp_path / "run" / "results"
    assert sorted(p.name for p in results.glob("*.json")) == sorted(
        f"round1-{e}.json" for e in engines)
    for engine in engines:
        result = json.loads((results / f"round1-{engine}.json").read_text())
        tree = plan.ENGINES[engine][0]
        version = {"closure": "0.27.1", "up": "0.28.0", "new": "0.34.0"}[tree]
        assert result["version"] == version and result["exit"] == 0
        assert result["vllm_file"].startswith(str(tmp_path / {"closure": "vt", "up": "vt28",
                                                              "new": "vtnew"}[tree]))
        assert result["attention_backend"] == "TRITON_ATTN"
        # a version's compile cache, named as before for Triton's attention
        assert result["cache_root"] == str(tmp_path / "run" / "vllm-cache" / f"cache-{version}")


def test_newest_engines_without_the_newest_tree_are_refused(tmp_path):
    where = _fake_engines(tmp_path)
    with pytest.raises(SystemExit, match=r"\['new_dflash2'\]: no newest upstream tree"):
        speed.main(["run", *where, "--round", "1", "--engines", "dflash2,new_dflash2"])


def test_a_paired_round_of_three_versions_asks_for_its_pairs(tmp_path):
    where = _fake_engines(tmp_path, names=("vt", "vt28", "vtnew"))
    with pytest.raises(SystemExit, match="--paired compares 0.27.1 with one upstream version "
                                         "at a time, and this run has three"):
        speed.main(["run", *where, "--round", "1", "--paired"])
    assert not (tmp_path / "run" / "logs").exists()


@pytest.mark.parametrize("engines, accepted", [
    ("base,up_base,dflash2,up_dflash2", True),
    ("new_base,base,dflash2,new_dflash2", True),
    ("up_base,new_base", False),     # two upstream versions: no 0.27.1 in the pair
    ("base,new_dflash2", False),     # two kinds
    ("base,up_base,new_base", False),
])
def test_a_pair_is_one_kind_on_0271_and_one_upstream_version(engines, accepted):
    names = engines.split(",")
    if accepted:
        assert speed.check_pairs(names) == [names[i:i + 2] for i in range(0, len(names), 2)]
    else:
        with pytest.raises(SystemExit, match="--paired: engines go in pairs"):
            speed.check_pairs(names)


def test_an_engine_named_twice_in_a_round_is_refused(tmp_path):
    where = _fake_engines(tmp_path)
    with pytest.raises(SystemExit, match="an engine runs once a round"):
        speed.main(["run", *where, "--round", "1", "--engines", "dflash2,base,dflash2"])


def test_a_paired_round_with_the_newest_release_records_each_engines_partner(tmp_path,
                                                                            capsys):
    where = _fake_engines(tmp_path, names=("vt", "vt28", "vtnew"))
    code = speed.main(["run", *where, "--round", "1", "--paired", "--reps", "1",
                       "--engines", "new_dflash2,dflash2"])
    assert code == 0, capsys.readouterr().out
    results = tmp_path / "run" / "results"
    for engine, partner in (("dflash2", "new_dflash2"), ("new_dflash2", "dflash2")):
        result = json.loads((results / f"round1-{engine}.json").read_text())
        assert (result["paired"], result["partner"]) == (True, partner)


def _fake_venv(tmp_path: Path, version: str) -> Path:
    """An interpreter as a venv gives one: this Python with its own site,
    which holds the fake vllm (installed, with its METADATA) and torch."""
    site = tmp_path / f"venv-{version}" / "site"
    package = site / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_fake_vllm_source(site))
    _metadata(site, version)
    python = tmp_path / f"venv-{version}" / "python"
    # a venv's site-packages come after PYTHONPATH's entries
    python.write_text(f'#!/bin/sh\nPYTHONPATH=${{PYTHONPATH:+$PYTHONPATH:}}{site} '
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_venv_interpreters_run_their_own_vllm_and_the_trees_stay_off_their_path(
        tmp_path, capsys, monkeypatch):
    # the trees' vllm refuses to start: only the venvs' may run
    _, where = _fake_trees(tmp_path, lambda tree: "raise RuntimeError('a tree ran')\n",
                           names=("vt", "vt28", "vtnew"))
    pythons = {"0271": _fake_venv(tmp_path, "0.27.1"), "0280": _fake_venv(tmp_path, "0.28.0"),
               "new": _fake_venv(tmp_path, "0.35.0")}
    # as setup_device.sh leaves it: 0.27.1's tree and the wheels first
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'vt'}:{tmp_path / 'site'}:/elsewhere")
    code = speed.main(["run", *where, "--round", "2", "--reps", "1",
                       *[arg for key, python in pythons.items()
                         for arg in (f"--python-{key}", str(python))]])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert _engines_run(printed) == ["up_base", "new_base", "base",
                                     "up_dflash2", "new_dflash2", "dflash2"]
    for engine, version in (("base", "0.27.1"), ("up_dflash2", "0.28.0"),
                            ("new_dflash2", "0.35.0")):
        result = json.loads((tmp_path / "run" / "results" / f"round2-{engine}.json").read_text())
        assert result["exit"] == 0
        # the venv's vLLM, and the newest release's version is the venv's
        assert result["vllm_file"] == str(tmp_path / f"venv-{version}" / "site" / "vllm"
                                          / "__init__.py")
        assert result["version"] == version
        assert result["cache_root"].endswith(f"cache-{version}-venv")


@pytest.mark.parametrize("venvs, expected", [
    # pip's venvs have FlashInfer: vLLM's default sampler holds
    (True, None),
    # the bundle's trees do not: the PyTorch sampler, as before
    (False, "0"),
])
def test_the_sampler_is_left_to_vllm_only_in_a_venv_made_by_pip(tmp_path, capsys,
                                                                monkeypatch, venvs, expected):
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    if venvs:
        _, where = _fake_trees(tmp_path, lambda tree: "raise RuntimeError('a tree ran')\n")
        where += ["--python-0271", str(_fake_venv(tmp_path, "0.27.1")),
                  "--python-0280", str(_fake_venv(tmp_path, "0.28.0"))]
    else:
        where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--reps", "1",
                       "--engines", "base,up_dflash2"])
    assert code == 0, capsys.readouterr().out
    for engine in ("base", "up_dflash2"):
        result = json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json").read_text())
        assert result["flashinfer_sampler_env"] == expected


def test_each_venv_builds_flashinfer_kernels_in_a_workspace_of_its_own(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.delenv("FLASHINFER_WORKSPACE_BASE", raising=False)
    _, where = _fake_trees(tmp_path, lambda tree: "raise RuntimeError('a tree ran')\n")
    where += ["--python-0271", str(_fake_venv(tmp_path, "0.27.1")),
              "--python-0280", str(_fake_venv(tmp_path, "0.28.0"))]
    code = speed.main(["run", *where, "--round", "1", "--reps", "1",
                       "--engines", "base,dflash2,up_base"])
    assert code == 0, capsys.readouterr().out
    spaces = {engine: json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json")
                                 .read_text())["flashinfer_workspace"]
              for engine in ("base", "dflash2", "up_base")}
    assert spaces["base"] == spaces["dflash2"] != spaces["up_base"]
    assert all(Path(space).is_relative_to(tmp_path / "run") for space in spaces.values())


def test_a_venv_of_another_version_than_its_flag_names_is_refused(tmp_path):
    where = _fake_engines(tmp_path)
    python = _fake_venv(tmp_path, "0.28.0")
    with pytest.raises(SystemExit, match=r"has vLLM 0.28.0, not 0.27.1"):
        speed.main(["run", *where, "--round", "1", "--python-0271", str(python)])
    assert not (tmp_path / "run" / "logs").exists()


def test_a_venv_interpreter_that_is_not_there_is_refused_before_any_engine(tmp_path):
    where = _fake_engines(tmp_path)
    with pytest.raises(SystemExit, match="is not an interpreter here"):
        speed.main(["run", *where, "--round", "1", "--python-0280",
                    str(tmp_path / "nowhere" / "python")])
    assert not (tmp_path / "run" / "logs").exists()


def test_the_attention_backend_goes_to_every_engine_and_its_result(tmp_path, capsys):
    where = _fake_engines(tmp_path)
    code = speed.main(["run", *where, "--round", "1", "--reps", "1",
                       "--engines", "dflash2,up_base", "--attention-backend", "auto"])
    assert code == 0, capsys.readouterr().out
    for engine, version in (("dflash2", "0.27.1"), ("up_base", "0.28.0")):
        result = json.loads((tmp_path / "run" / "results" / f"round1-{engine}.json").read_text())
        assert result["attention_backend"] == "auto"
        # a compile cache of its own, apart from the Triton runs'
        assert result["cache_root"].endswith(f"cache-{version}-auto")
    # and the run's later rounds keep to it
    with pytest.raises(SystemExit, match="--attention-backend TRITON_ATTN: .* holds results "
                                         "of another backend"):
        speed.main(["run", *where, "--round", "2", "--engines", "base"])


def test_an_engine_asks_vllm_for_the_backend_it_was_given(tmp_path, monkeypatch):
    asked = []
    vllm = type(sys)("vllm")
    vllm.__file__ = "vllm/__init__.py"
    vllm.SamplingParams = lambda **kwargs: kwargs

    class LLM:
        def __init__(self, **kwargs):
            asked.append(kwargs)
            raise RuntimeError("stop here")

    vllm.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    models = tmp_path / "models.json"
    models.write_text(json.dumps(MODELS))
    args = argparse.Namespace(name="dflash2", round=1, models=str(models),
                              result=str(tmp_path / "r.json"), attention_backend="FLASH_ATTN",
                              vllm_version=None)
    with pytest.raises(RuntimeError, match="stop here"):
        speed_engine.run_engine(args)
    assert asked[0]["attention_config"] == {"backend": "FLASH_ATTN"}
    assert asked[0]["speculative_config"]["attention_backend"] == "FLASH_ATTN"


def _write_three(run: Path, up_spec: float, new_spec: float, new_base: float = 100.0,
                 backend: str | None = None) -> None:
    """Two rounds of all six engines, the newest release 0.34.0; 0.27.1's
    DFlash2 at 250 tokens/s over 100 without."""
    _write_results(run, 250.0, up_spec)
    for round_number in (1, 2):
        for engine, reps in (("new_base", [new_base] * 3), ("new_dflash2", [new_spec] * 3)):
            result = _result(engine, round_number, reps, *(
                (10.0, 40.0) if engine == "new_dflash2" else ()))
            result["version"] = "0.34.0"
            (run / "results" / f"round{round_number}-{engine}.json").write_text(
                json.dumps(result))
    if backend:
        for path in (run / "results").glob("*.json"):
            result = json.loads(path.read_text())
            result["attention_backend"] = backend
            result["attention_seen"] = ["FLASH_ATTN", "FA3"]
            path.write_text(json.dumps(result))


@pytest.mark.parametrize("up_spec, new_spec, new_base, up, new, code", [
    # 2.5 / 2.5 and 2.5 / 2.5
    (250.0, 250.0, 100.0, ("1.000", "PASS"), ("1.000", "PASS"), 0),
    # the newest's speedup 250 / 90: 2.5 / 2.778
    (250.0, 250.0, 90.0, ("1.000", "PASS"), ("0.900", "FAIL"), 1),
    # 0.28.0's 2.0: 2.5 / 2.0; the newest's 2.0 too
    (200.0, 200.0, 100.0, ("1.250", "PASS"), ("1.250", "PASS"), 0),
    # the newest's 2.5, 0.28.0's 2.778: a report fails on either ratio
    (277.8, 250.0, 100.0, ("0.900", "FAIL"), ("1.000", "PASS"), 1),
])
def test_the_report_sets_three_versions_side_by_side_with_a_ratio_for_each_upstream(
        tmp_path, capsys, up_spec, new_spec, new_base, up, new, code):
    _write_three(tmp_path, up_spec, new_spec, new_base)
    assert speed.main(["report", "--run", str(tmp_path), "--copy-to",
                       str(tmp_path / "out")]) == code
    lines = capsys.readouterr().out.splitlines()
    for cell in plan.CELLS:
        regime, load = cell.split("_")
        start = lines.index(next(line for line in lines
                                 if line.startswith(f"== {regime} acceptance, {load} ")))
        block = lines[start:lines.index("", start)]
        # the three versions' rows, then 0.28.0's ratio, then the newest's
        assert [line.split()[0] for line in block[2:5]] == ["0.27.1", "0.28.0", "0.34.0"]
        new_row = block[4].split()
        # no spec, DFlash2, speedup, acceptance 1 + 40 / 10
        assert new_row[1] == f"{new_base:.0f}" and new_row[4] == f"{new_spec:.0f}"
        assert new_row[7] == f"{new_spec / new_base:.3f}" and new_row[10] == "5.00"
        for line, label, (point, verdict) in ((block[5], "0.28.0", up), (block[7], "0.34.0", new)):
            # 0.27.1's no-spec repetitions (99, 100, 101) widen the interval a little
            assert re.fullmatch(rf"speedup ratio 0.27.1 / {label}: {point} \[[\d.]+, [\d.]+\] "
                                rf"\(\+-[01]\.\d%\): {verdict}", line), line
        for line, (point, _) in ((block[6], up), (block[8], new)):
            assert line == f"  each round's own: round 1 {point}, round 2 {point}"
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    for entry in summary.values():
        assert set(entry["rows"]) == {"0.27.1", "0.28.0", "0.34.0"}
        assert entry["ratio"]["point"] == pytest.approx(float(up[0]), abs=5e-4)
        assert entry["ratio_new"]["point"] == pytest.approx(float(new[0]), abs=5e-4)
        assert entry["ratio_new"]["version"] == "0.34.0"


def test_a_report_without_the_newest_release_is_as_it_was(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    speed.main(["report", "--run", str(tmp_path), "--copy-to", str(tmp_path / "out")])
    header, text = capsys.readouterr().out.split("\n", 1)
    assert "0.34.0" not in text and "ratio_new" not in (tmp_path / "out" / "report.json").read_text()
    # heading, columns, two rows, the ratio and each round's own
    assert [len(block.splitlines()) for block in text.split("\n\n")[:4]] == [6] * 4
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {cell: (sorted(entry), sorted(entry["ratio"])) for cell, entry in summary.items()} == {
        cell: (["ratio", "rows"], ["by_round", "half_width", "hi", "lo", "point", "rounds",
                                   "verdict"]) for cell in plan.CELLS}


def test_the_newest_releases_ratio_says_what_it_lacks(tmp_path, capsys):
    _write_three(tmp_path, 250.0, 250.0)
    for path in (tmp_path / "results").glob("*new_dflash2.json"):
        path.unlink()
    assert speed.main(["report", "--run", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.count("speedup ratio 0.27.1 / 0.34.0: both versions' base and DFlash2 "
                      "figures needed") == 4
    assert text.count("speedup ratio 0.27.1 / 0.28.0: 1.000") == 4


@pytest.mark.parametrize("partner, paired", [("new_dflash2", True), ("up_dflash2", False)])
def test_the_newest_releases_pairs_are_judged_within_the_pairs_it_ran(tmp_path, capsys,
                                                                      partner, paired):
    # every round of 0.27.1 and the newest release ran paired; 0.27.1's
    # DFlash2 says with whom
    _write_three(tmp_path, 250.0, 250.0)
    for path in (tmp_path / "results").glob("*.json"):
        result = json.loads(path.read_text())
        result["paired"] = result["engine"] in ("base", "new_base", "dflash2", "new_dflash2")
        result["partner"] = {"base": "new_base", "new_base": "base", "dflash2": partner,
                             "new_dflash2": "dflash2"}.get(result["engine"])
        path.write_text(json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    text = capsys.readouterr().out
    assert text.count("speedup ratio 0.27.1 / 0.34.0 (cycles paired, order balanced): ") == (
        4 if paired else 0)
    assert text.count("speedup ratio 0.27.1 / 0.28.0: 1.000") == 4


def test_rounds_that_pair_0271_with_each_upstream_in_turn_judge_each_within_its_pairs(
        tmp_path, capsys):
    # rounds 1 and 2 pair 0.27.1 with 0.28.0, rounds 3 and 4 with the
    # newest, whose DFlash2 runs 10% slower than 0.27.1's in its pairs
    _write_paired(tmp_path, SPELLS, SPELLS)
    for path in (tmp_path / "results").glob("*.json"):
        result = json.loads(path.read_text())
        result["partner"] = {"base": "up_base", "up_base": "base", "dflash2": "up_dflash2",
                             "up_dflash2": "dflash2"}[result["engine"]]
        path.write_text(json.dumps(result))
    for round_number in (3, 4):
        for engine, reps, partner in (
                ("base", [100.0] * 6, "new_base"), ("new_base", [100.0] * 6, "base"),
                ("dflash2", SPELLS, "new_dflash2"),
                ("new_dflash2", [rate / 0.9 for rate in SPELLS], "dflash2")):
            result = _result(engine, round_number, reps, 10.0, 50.0)
            result.update(paired=True, partner=partner, version="0.34.0")
            (tmp_path / "results" / f"round{round_number}-{engine}.json").write_text(
                json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    text = capsys.readouterr().out
    assert text.count("speedup ratio 0.27.1 / 0.28.0 (cycles paired, order balanced): "
                      "1.000 [1.000, 1.000] (+-0.0%): PASS") == 4
    assert text.count("  each round's own: round 1 1.000, round 2 1.000\n") == 4
    assert text.count("speedup ratio 0.27.1 / 0.34.0 (cycles paired, order balanced): "
                      "0.900 [0.900, 0.900] (+-0.0%): FAIL") == 4
    assert text.count("  each round's own: round 3 0.900, round 4 0.900\n") == 4


@pytest.mark.parametrize("backend, header", [
    (None, "attention backend: TRITON_ATTN"),
    ("auto", "attention backend: auto (vLLM chooses); vLLM's logs: FLASH_ATTN, FA3"),
])
def test_the_reports_header_names_the_attention_backend(tmp_path, capsys, backend, header):
    _write_three(tmp_path, 250.0, 250.0, backend=backend)
    speed.main(["report", "--run", str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[0] == header


def test_a_report_of_mixed_backends_says_so_in_its_header(tmp_path, capsys):
    _write_results(tmp_path, 250.0, 250.0)
    path = tmp_path / "results" / "round2-up_dflash2.json"
    result = json.loads(path.read_text())
    result["attention_backend"] = "FLASH_ATTN"
    path.write_text(json.dumps(result))
    speed.main(["report", "--run", str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[0] == (
        "attention backend: MIXED, the figures compare unlike engines: FLASH_ATTN: "
        "up_dflash2 round 2; TRITON_ATTN: base round 1, base round 2, dflash2 round 1, "
        "dflash2 round 2, up_base round 1, up_base round 2, up_dflash2 round 1")


def test_a_pending_round_runs_what_earlier_calls_left_in_the_rounds_order(tmp_path, capsys):
    # 0.28.0's engines die at once
    where = _fake_engines(tmp_path, {"vt28": 0}, names=("vt", "vt28", "vtnew"))
    speed.main(["run", *where, "--round", "2", "--reps", "1",
                "--engines", "up_base,dflash2,new_base"])
    assert _engines_run(capsys.readouterr().out) == ["up_base", "dflash2", "new_base"]
    speed.main(["run", *where, "--round", "2", "--reps", "1", "--pending"])
    printed = capsys.readouterr().out
    # round 2's order: up_base, new_base, base, up_dflash2, new_dflash2, dflash2;
    # up_base again, as it failed
    assert "[round 2] done already: new_base,dflash2; to run: " \
           "up_base,base,up_dflash2,new_dflash2" in printed
    assert _engines_run(printed) == ["up_base", "base", "up_dflash2", "new_dflash2"]
    speed.main(["run", *where, "--round", "2", "--reps", "1", "--pending",
                "--engines", "base,up_base"])
    printed = capsys.readouterr().out
    assert "done already: base; to run: up_base" in printed
    assert _engines_run(printed) == ["up_base"]


def test_a_pending_round_is_not_paired(tmp_path):
    where = _fake_engines(tmp_path)
    with pytest.raises(SystemExit, match="--pending picks engines one by one"):
        speed.main(["run", *where, "--round", "1", "--pending", "--paired",
                    "--engines", "base,up_base"])
