"""The DFlash2 walk and draft-logit cache kernels, in Triton's interpreter.

Held to plain-torch references, to 0.27.1's own Gumbel sampler (the draw the
verification side makes) and to upstream 0.28.0's kernels.
"""

from __future__ import annotations

import pytest
from _dflash2_cases import Case, case_ids, result_of

pytestmark = pytest.mark.runtime

GREEDY = [
    Case("greedy-drafting-k4", "greedy_walk_matches_reference",
         dict(num_reqs=3, num_steps=3, top_k=4, seed=0, probabilistic=False)),
    Case("greedy-drafting-k5-unpadded-lanes", "greedy_walk_matches_reference",
         dict(num_reqs=4, num_steps=2, top_k=5, seed=1, probabilistic=False)),
    Case("temperature0-in-sampled-batch-k16", "greedy_walk_matches_reference",
         dict(num_reqs=2, num_steps=7, top_k=16, seed=2, probabilistic=True)),
]

LAW = [
    Case("law-t0.6-k4-2steps", "sampled_walk_follows_softmax",
         dict(temperature=0.6, num_samples=1000, top_k=4, num_steps=2, seed=10)),
    Case("law-t1.8-k3-2steps", "sampled_walk_follows_softmax",
         dict(temperature=1.8, num_samples=600, top_k=3, num_steps=2, seed=11)),
]

KEYING = [
    Case("keying-fp32", "sampled_walk_keys_like_verification",
         dict(num_reqs=4, num_steps=4, top_k=4, seed=20, fp64=False)),
    Case("keying-fp64", "sampled_walk_keys_like_verification",
         dict(num_reqs=4, num_steps=4, top_k=5, seed=21, fp64=True)),
]

CACHE = [
    Case("cache-k4", "cache_holds_tempered_scores",
         dict(num_reqs=3, num_steps=3, top_k=4, seed=30)),
    Case("cache-k6-7steps", "cache_holds_tempered_scores",
         dict(num_reqs=2, num_steps=7, top_k=6, seed=31)),
]

CLEARING = [
    Case("disjoint-candidates", "cache_write_clears_previous_columns",
         dict(top_k=4, overlap=0, seed=40)),
    Case("half-shared-candidates", "cache_write_clears_previous_columns",
         dict(top_k=4, overlap=2, seed=41)),
    Case("same-candidates-other-lanes", "cache_write_clears_previous_columns",
         dict(top_k=4, overlap=4, seed=42)),
]

PADDING = [
    Case("padding-rows", "padding_rows_are_inert",
         dict(num_live=2, num_padding=3, seed=50)),
]

UPSTREAM = [
    Case("upstream-t0.7", "walk_matches_upstream",
         dict(num_reqs=3, num_steps=3, top_k=4, seed=60, temperature=0.7)),
    Case("upstream-t1.3-k8", "walk_matches_upstream",
         dict(num_reqs=2, num_steps=4, top_k=8, seed=61, temperature=1.3)),
]

ALL = GREEDY + LAW + KEYING + CACHE + CLEARING + PADDING + UPSTREAM


@pytest.fixture(scope="module")
def results(run_probe):
    return run_probe("probe_kernels.py", ALL, timeout=900)


@pytest.mark.parametrize("case", GREEDY, ids=case_ids(GREEDY))
def test_greedy_walk_is_the_exact_argmax_path(results, case):
    result = result_of(results, case)
    assert result["tokens_equal"]
    if case.params["probabilistic"]:
        # A temperature-0 request's cached distribution is its raw scores.
        assert result["realized_equal"]


@pytest.mark.parametrize("case", LAW, ids=case_ids(LAW))
def test_sampled_paths_follow_softmax_of_scores_over_temperature(results, case):
    result = result_of(results, case)
    assert result["p_value"] > 1e-3, result
    # The same counts reject the untempered law: the test can tell them apart.
    assert result["p_value_against_untempered"] < 1e-3, result


@pytest.mark.parametrize("case", KEYING, ids=case_ids(KEYING))
def test_sampled_draws_are_keyed_like_0271_verification_on_the_drafts_own_stream(results, case):
    result = result_of(results, case)
    # The patched venv carries the draft-noise-salt fix: 0.29.0's salt, and
    # the spec-step-seed fix: each draft step on a seed of its own.
    assert result["salt"] == 1 << 30
    assert result["steps_mixed"]
    assert result["draws_equal_at_q_minus_1"], result
    # Keyed one position off either way, the draws differ: the check has teeth.
    assert not result["draws_equal_at_q"]
    assert not result["draws_equal_at_q_minus_2"]
    # Verification's own noise is not the draft's: the unbiasedness fix.
    assert not result["draws_equal_at_verifications_key"]


@pytest.mark.parametrize("case", CACHE, ids=case_ids(CACHE))
def test_cache_holds_scores_over_temperature_and_neg_inf_elsewhere(results, case):
    result = result_of(results, case)
    assert result["cache_equal"], result
    assert result["unused_slots_untouched"]
    assert result["ids_recorded"]
    assert result["finite_per_row"] == [0, case.params["top_k"]]


@pytest.mark.parametrize("case", CLEARING, ids=case_ids(CLEARING))
def test_cache_write_clears_the_previous_steps_columns(results, case):
    result = result_of(results, case)
    assert result["only_latest_columns"]
    assert result["finite_per_row"] == [case.params["top_k"]]


@pytest.mark.parametrize("case", PADDING, ids=case_ids(PADDING))
def test_padding_rows_write_no_token_and_no_cache(results, case):
    result = result_of(results, case)
    assert result["padding_tokens_untouched"]
    assert result["padding_realized_untouched"]
    assert result["slot0_logits_unchanged"]
    assert result["slot0_ids_unchanged"]
    assert result["live_rows_written"]


@pytest.mark.parametrize("case", UPSTREAM, ids=case_ids(UPSTREAM))
def test_walk_draws_as_upstream_and_caches_upstreams_scores_over_temperature(results, case):
    result = result_of(results, case)
    assert result["tokens_equal"]
    assert result["same_columns"]
    assert result["cache_is_upstream_over_t"]
