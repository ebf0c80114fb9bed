"""DFlash2Speculator in patched 0.27.1: what it caches, and when it writes.

Built from a real engine config on CPU; only the draft forward is replaced
(no CPU attention backend here), by fixed hidden states.
"""

from __future__ import annotations

import pytest
from _dflash2_cases import Case, case_ids, result_of

pytestmark = pytest.mark.runtime

GREEDY = [
    Case("greedy-3-steps", "greedy_drafting_caches_nothing", dict(steps=3, seed=0)),
    Case("greedy-5-steps", "greedy_drafting_caches_nothing", dict(steps=5, seed=1)),
]
SAMPLED = [
    Case("sampled-3-steps", "sampled_drafting_caches_tempered", dict(steps=3, seed=2)),
    Case("sampled-4-steps", "sampled_drafting_caches_tempered", dict(steps=4, seed=3)),
]
CAPTURE_OURS = Case("capture-ours", "capture_leaves_slot0_alone",
                    dict(steps=3, seed=4, capture_with="ours"))
CAPTURE_INHERITED = Case("capture-inherited", "capture_leaves_slot0_alone",
                         dict(steps=3, seed=4, capture_with="dflash1"))
ALL = GREEDY + SAMPLED + [CAPTURE_OURS, CAPTURE_INHERITED]


@pytest.fixture(scope="module")
def results(run_probe):
    return run_probe("probe_speculator.py", ALL)


@pytest.mark.parametrize("case", GREEDY, ids=case_ids(GREEDY))
def test_greedy_drafting_caches_nothing_and_walks_the_argmax(results, case):
    result = result_of(results, case)
    assert result["draft_logits_none_at_start"]
    assert result["draft_logits_none_after"]
    assert result["tokens_equal_greedy_walk"]


@pytest.mark.parametrize("case", SAMPLED, ids=case_ids(SAMPLED))
def test_sampled_drafting_caches_tempered_scores_in_an_fp32_neg_inf_buffer(results, case):
    """After two drafting steps: the second's scores / T, nothing of the first."""
    result = result_of(results, case)
    assert result["spec"] == ["torch.float32", "-inf"]
    assert result["buffer_dtype"] == "torch.float32"
    assert result["buffer_all_neg_inf_at_start"]
    assert result["buffer_shape"][1] == case.params["steps"]
    assert result["mapping_inert_at_start"]
    assert result["cache_equal"]
    assert result["tokens_are_candidates"]


def test_graph_capture_writes_nothing_into_slot_0(results):
    result = result_of(results, CAPTURE_OURS)
    assert result["mapping_during_capture"] == [-1]
    assert result["cache_unchanged"]
    assert result["ids_unchanged"]


def test_inherited_capture_would_overwrite_slot_0(results):
    """Why capture is overridden: 0.27.1's zero-filled padding rows hit slot 0."""
    result = result_of(results, CAPTURE_INHERITED)
    assert result["mapping_during_capture"] == [0]
    assert not result["cache_unchanged"]
