"""qwen3_dflash2 as installed in patched 0.27.1, held to upstream 0.28.0's.

Upstream's module is imported into the same patched tree next to ours (it
needs exactly the seams the patch adds), so both run on identical vLLM code
and any difference is the modules' own.
"""

from __future__ import annotations

import pytest
from _dflash2_cases import Case, case_ids, result_of

from tests.runtime import tiny_configs

pytestmark = pytest.mark.runtime

# The runtime tests' own DFlash2 draft: three sliding-window, non-causal
# layers. transformers drops a Qwen3 `sliding_window` unless
# `use_sliding_window` is set, and 0.27.1's DFlash layer then finds no window
# to build with, so the window is also given where the layer looks first.
THREE_LAYER_DRAFT = {
    **tiny_configs.DFLASH2_DRAFT,
    "dflash_config": {**tiny_configs.DFLASH2_DRAFT["dflash_config"],
                      "swa_window_size": tiny_configs.DFLASH2_DRAFT["sliding_window"]},
}

CONV = [
    Case("pow2-block4-taps3-fp32", "grouped_conv_matches_upstream",
         dict(num_blocks=3, block_size=4, taps=3, num_groups=4, group_size=8,
              dtype="float32", seed=0)),
    Case("pow2-block8-taps4-fp32", "grouped_conv_matches_upstream",
         dict(num_blocks=2, block_size=8, taps=4, num_groups=2, group_size=16,
              dtype="float32", seed=1)),
    Case("block5-taps4-bf16", "grouped_conv_matches_upstream",
         dict(num_blocks=3, block_size=5, taps=4, num_groups=2, group_size=16,
              dtype="bfloat16", seed=2)),
    Case("block3-taps3-fp32", "grouped_conv_matches_upstream",
         dict(num_blocks=4, block_size=3, taps=3, num_groups=8, group_size=4,
              dtype="float32", seed=3)),
    Case("taps-past-block-fp32", "grouped_conv_matches_upstream",
         dict(num_blocks=3, block_size=2, taps=4, num_groups=2, group_size=4,
              dtype="float32", seed=4)),
    # Fewer rows than taps: upstream's shift cannot express it; the loop can.
    Case("fewer-rows-than-taps", "grouped_conv_matches_upstream",
         dict(num_blocks=1, block_size=2, taps=3, num_groups=2, group_size=4,
              dtype="float32", seed=5)),
]

EDGES = [
    Case("edges-fp32-k5", "score_edges_matches_upstream",
         dict(batch=3, steps=4, top_k=5, rank=8, vocab=50, dtype="float32", seed=10)),
    Case("edges-bf16-k4", "score_edges_matches_upstream",
         dict(batch=2, steps=3, top_k=4, rank=16, vocab=40, dtype="bfloat16", seed=11)),
    Case("edges-one-step-k16", "score_edges_matches_upstream",
         dict(batch=2, steps=1, top_k=16, rank=4, vocab=64, dtype="float32", seed=12)),
]

PARAMETERS = [
    Case("default-fp32", "parameters_match_upstream",
         dict(dtype="float32", steps=3, dflash=None)),
    Case("serving-shape-bf16", "parameters_match_upstream",
         dict(dtype="bfloat16", steps=7,
              dflash={"selector_top_k": 16, "selector_rank": 32,
                      "conv_kernel_size": 4, "conv_group_size": 32,
                      "input_embedding_scale": 2.0, "output_multiplier": 0.25,
                      "final_logit_softcapping": 30.0})),
    Case("three-layer-noncausal", "parameters_match_upstream",
         dict(dtype="float32", steps=3, dflash=None,
              configs={"target": tiny_configs.TARGET, "draft": THREE_LAYER_DRAFT})),
]

CANDIDATES = [
    Case("candidates-fp32", "compute_candidates_matches_upstream",
         dict(dtype="float32", dflash=None, tokens=12, seed=20)),
    Case("candidates-scaled-capped-bf16", "compute_candidates_matches_upstream",
         dict(dtype="bfloat16", dflash={"output_multiplier": 0.5,
                                        "final_logit_softcapping": 3.0},
              tokens=12, seed=21)),
    Case("candidates-k7-scaled-capped-fp32", "compute_candidates_matches_upstream",
         dict(dtype="float32", dflash={"output_multiplier": 0.5,
                                       "final_logit_softcapping": 3.0,
                                       "selector_top_k": 7},
              tokens=9, seed=22)),
]

SELECTOR = [
    Case("selector-fp32", "candidate_selector_matches_upstream",
         dict(dtype="float32", batch=3, seed=30)),
    Case("selector-bf16", "candidate_selector_matches_upstream",
         dict(dtype="bfloat16", batch=2, seed=31)),
]

LAYER = [
    Case("layer-fp32-with-residual", "decoder_layer_matches_upstream",
         dict(dtype="float32", steps=3, with_residual=True, seed=40)),
    Case("layer-bf16-first-layer-block5", "decoder_layer_matches_upstream",
         dict(dtype="bfloat16", steps=4, with_residual=False, seed=41)),
]

LOADING = [
    Case("load-plain-names-fp32", "load_weights_places_like_upstream",
         dict(dtype="float32", naming="plain", seed=50)),
    Case("load-encoder-names-fp32", "load_weights_places_like_upstream",
         dict(dtype="float32", naming="renamed", seed=51)),
    Case("load-midlayer-names-bf16", "load_weights_places_like_upstream",
         dict(dtype="bfloat16", naming="midlayer", seed=52)),
]

ALL = CONV + EDGES + PARAMETERS + CANDIDATES + SELECTOR + LAYER + LOADING


@pytest.fixture(scope="module")
def results(run_probe):
    return run_probe("probe_model.py", ALL)


@pytest.mark.parametrize("case", CONV, ids=case_ids(CONV))
def test_grouped_conv_matches_upstream_and_the_per_row_sum(results, case):
    result = result_of(results, case)
    assert result["reference_close"]
    if "equal" in result:
        assert result["equal"], result


@pytest.mark.parametrize("case", EDGES, ids=case_ids(EDGES))
def test_score_edges_matches_upstream_and_the_bilinear_sum(results, case):
    result = result_of(results, case)
    assert result["dtype"] == result["upstream_dtype"] == "torch.float32"
    assert result["close_to_upstream"], result
    assert result["reference_close"], result


@pytest.mark.parametrize("case", PARAMETERS, ids=case_ids(PARAMETERS))
def test_built_model_has_upstreams_parameter_names_shapes_and_dtypes(results, case):
    result = result_of(results, case)
    assert result["ours"] == result["upstream"]
    assert result["ours_layout"] == result["upstream_layout"]
    assert result["ours_layout"]["layer"] == "DFlash2Qwen3DecoderLayer"
    names = {name for name, _, _ in result["ours"]}
    assert "model.candidate_selector.predecessor_codebook" in names
    assert "model.layers.0.mlp_conv.kernel_projection.weight" in names


@pytest.mark.parametrize("case", CANDIDATES, ids=case_ids(CANDIDATES))
def test_compute_candidates_matches_upstream(results, case):
    result = result_of(results, case)
    assert result["ids_equal"]
    assert result["values"]["equal"], result["values"]
    assert result["dtypes"] == result["upstream_dtypes"] == ["torch.int64", "torch.float32"]
    assert result["reference_ids_equal"] in (True, None)
    assert result["reference_close"] in (True, None)


@pytest.mark.parametrize("case", SELECTOR, ids=case_ids(SELECTOR))
def test_candidate_selector_forward_matches_upstream(results, case):
    assert result_of(results, case)["close"]


@pytest.mark.parametrize("case", LAYER, ids=case_ids(LAYER))
def test_decoder_layer_forward_matches_upstream(results, case):
    result = result_of(results, case)
    assert result["hidden"]["equal"], result
    assert result["residual"]["equal"], result


@pytest.mark.parametrize("case", LOADING, ids=case_ids(LOADING))
def test_safetensors_checkpoint_loads_where_upstream_puts_it(results, case):
    result = result_of(results, case)
    assert result["misplaced"] == []
    assert result["not_loaded"] == []
    # The DFlash2 tensors themselves went through the loader.
    assert len(result["dflash2_tensors"]) == 7
    if case.params["naming"] == "renamed":
        assert "encoder.fc.weight" in result["stored_names"]
    if case.params["naming"] == "plain":
        assert result["differs_from_upstream"] == []
