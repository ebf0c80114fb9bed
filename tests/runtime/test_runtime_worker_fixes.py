"""The upstream fixes, seen working in vLLM 0.27.1 and seen missing without them.

Three interpreters run the same checks (venv_side/closure_probe.py, kernels
in Triton's interpreter): the patched 0.27.1, the pristine one, and, where
the check needs DFlash2 itself, the one with the DFlash2 PR's edits alone
(`apply --only-pr`). Each check must hold on the patched venv and must fail
where the fix is missing.

DFlash1 users are held to the same checks where the fix reaches them (the
prepare-inputs kernel, the AOT schedule and the prefix-cache block are
DFlash1's as much as DFlash2's), and to being no worse where it should not:
full-attention groups, other attention backends and other methods keep
0.27.1's behaviour.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.runtime

DFLASH1 = "vllm.v1.worker.gpu.spec_decode.dflash.speculator:DFlashSpeculator"
DFLASH2 = "vllm.v1.worker.gpu.spec_decode.dflash2.speculator:DFlash2Speculator"

# block_size 4; logical blocks 0 and 1 evicted by a sliding window (block id
# 0, the null block), 2 and 3 resident in physical blocks 7 and 8.
EVICTED = [0, 0, 7, 8, 9, 10, 11, 12]
CHECKS = {
    # Context rows at positions 6, 7 sit in an evicted block.
    "null-block-context": ("prepare_inputs", dict(
        target_positions=[6, 7, 8, 9], num_rejected=0, block_table=EVICTED,
        block_size=4, num_speculative_steps=3, max_model_len=128)),
    # Two rows rejected: the query restarts at position 4, in an evicted block.
    "null-block-query": ("prepare_inputs", dict(
        target_positions=[2, 3, 4, 5], num_rejected=2, block_table=EVICTED,
        block_size=4, num_speculative_steps=3, max_model_len=128)),
    # DSpark's mode of the same kernel, rows 12 and 13 rejected.
    "rejected-rows-dspark": ("prepare_inputs", dict(
        target_positions=[10, 11, 12, 13], num_rejected=2, block_table=EVICTED,
        block_size=4, num_speculative_steps=3, max_model_len=128, sample_from_anchor=True)),
    # The last accepted position is max_model_len - 1.
    "seq-lens-at-the-limit": ("prepare_inputs", dict(
        target_positions=[124, 125, 126, 127], num_rejected=0,
        block_table=list(range(1, 33)), block_size=16, num_speculative_steps=3,
        max_model_len=128)),
    "aot-dflash1": ("aot_schedule", dict(speculator=DFLASH1)),
    "aot-dflash2": ("aot_schedule", dict(speculator=DFLASH2)),
    "prefix-dflash1": ("prefix_cache_hits", dict(draft="dflash1-full")),
    "prefix-dflash2": ("prefix_cache_hits", dict(draft="dflash2")),
    "prefix-ngram": ("prefix_cache_hits", dict(draft=None)),
    "prefix-eagle3": ("prefix_cache_hits", dict(draft="dflash1-full", method="eagle3")),
    "draft-model-draws": ("draft_model_draws", {}),
    "gumbel-draft-stream": ("gumbel_draft_stream", {}),
    "walk-draws": ("walk_draws", {}),
}
WHERE = {
    "patched": list(CHECKS),
    "pristine": [name for name in CHECKS if name not in ("aot-dflash2", "prefix-dflash2",
                                                         "walk-draws")],
    "only_pr": ["aot-dflash2", "prefix-dflash2", "walk-draws"],
}


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons, tiny_models):
    pythons = {"patched": edit_set_pythons["patched"],
               "pristine": edit_set_pythons["pristine"],
               "only_pr": edit_set_pythons["only-pr"]}
    code = "import closure_probe, sys, json; closure_probe.main(json.loads(sys.argv[1]))"
    models = {name: str(path) for name, path in tiny_models.items()}
    jobs = []
    for venv, names in WHERE.items():
        request = {"models": models, "checks": {n: CHECKS[n] for n in names}}
        jobs.append(snippets.start(pythons[venv], code, args=[json.dumps(request)]))
    return dict(zip(WHERE, snippets.gather(jobs)))


def value(seen: dict, venv: str, name: str) -> dict:
    result = seen[venv][name]
    assert result["ok"], f"{name} in the {venv} venv: {result['error']}"
    return result["value"]


# -- the prepare-inputs kernel (DFlash1, DSpark and DFlash2 share it) -----------


def test_a_context_row_in_the_null_block_writes_no_draft_kv(seen):
    fixed, pristine = (value(seen, v, "null-block-context") for v in ("patched", "pristine"))
    pad = fixed["pad_slot_id"]
    assert fixed["context_slots"] == [pad, pad, 28, 29]
    assert not fixed["writes_null_block"]
    # 0.27.1 writes positions 6 and 7 into slots 2 and 3 of block 0.
    assert pristine["context_slots"] == [2, 3, 28, 29]
    assert pristine["writes_null_block"]
    # The resident rows, the query and its slots are 0.27.1's.
    for key in ("context_positions", "query_positions", "query_slots", "seq_len"):
        assert fixed[key] == pristine[key], key


def test_a_query_row_in_the_null_block_writes_no_draft_kv(seen):
    fixed, pristine = (value(seen, v, "null-block-query") for v in ("patched", "pristine"))
    pad = fixed["pad_slot_id"]
    # The query follows the two accepted rows, at positions 4 to 7: block 1,
    # evicted.
    assert fixed["query_positions"] == [4, 5, 6, 7]
    assert fixed["query_slots"] == [pad] * 4
    assert fixed["context_slots"] == [pad] * 4
    assert not fixed["writes_null_block"]
    assert pristine["writes_null_block"]


def test_rejected_rows_are_no_longer_context(seen):
    fixed, pristine = (value(seen, v, "rejected-rows-dspark") for v in ("patched", "pristine"))
    pad = fixed["pad_slot_id"]
    assert fixed["context_positions"] == [10, 11, 0, 0]
    assert fixed["context_slots"] == [30, 31, pad, pad]
    assert fixed["query_positions"] == [12, 13, 14, 15]
    assert fixed["query_slots"] == [32, 33, 34, 35]
    assert pristine["context_positions"] == [10, 11, 12, 13]


def test_seq_lens_stays_within_max_model_len(seen):
    fixed, pristine = (value(seen, v, "seq-lens-at-the-limit") for v in ("patched", "pristine"))
    assert fixed["seq_len"] == 128
    assert pristine["seq_len"] == 132
    assert max(fixed["query_positions"]) == 127


# -- FlashAttention's AOT schedule ------------------------------------------------


@pytest.mark.parametrize("speculator", ["aot-dflash1", "aot-dflash2"])
def test_a_sliding_window_draft_group_has_the_aot_schedule_off(seen, speculator):
    fixed = value(seen, "patched", speculator)
    assert fixed == {"sliding_window_aot": False, "full_attention_aot": True,
                     "other_builder_has_flag": False}
    unfixed = value(seen, "pristine" if speculator == "aot-dflash1" else "only_pr", speculator)
    assert unfixed["sliding_window_aot"] is True


def test_dflash1_full_attention_groups_and_other_backends_keep_0271s_schedule(seen):
    fixed, pristine = (value(seen, v, "aot-dflash1") for v in ("patched", "pristine"))
    assert fixed["full_attention_aot"] == pristine["full_attention_aot"] is True
    assert fixed["other_builder_has_flag"] == pristine["other_builder_has_flag"] is False


# -- prefix-cache hits --------------------------------------------------------------


@pytest.mark.parametrize("draft", ["prefix-dflash1", "prefix-dflash2"])
def test_a_dflash_draft_keeps_the_last_block_of_a_prefix_hit(seen, draft):
    # A 64-token prompt in blocks of 16: the last token is always recomputed,
    # so 48 tokens is every block a hit can give.
    assert value(seen, "patched", draft)["cached_tokens"] == 48
    unfixed = value(seen, "pristine" if draft == "prefix-dflash1" else "only_pr", draft)
    assert unfixed["cached_tokens"] == 32


@pytest.mark.parametrize("check,tokens", [("prefix-ngram", 48), ("prefix-eagle3", 32)])
def test_other_methods_keep_0271s_prefix_hits(seen, check, tokens):
    # EAGLE still drops the block: its draft KV depends on the next token.
    for venv in ("patched", "pristine"):
        assert value(seen, venv, check)["cached_tokens"] == tokens


# -- the draft's Gumbel noise -------------------------------------------------------


def test_a_draft_models_probabilistic_draft_draws_on_a_stream_of_its_own(seen):
    fixed = value(seen, "patched", "draft-model-draws")
    assert fixed["gumbel_sample_takes_is_drafting"]
    assert fixed["equal_to_salted_stream"] == 1.0
    assert fixed["equal_to_verification_stream"] < 0.5
    # 0.27.1 draws the proposal with verification's own noise, row for row.
    pristine = value(seen, "pristine", "draft-model-draws")
    assert not pristine["gumbel_sample_takes_is_drafting"]
    assert pristine["equal_to_verification_stream"] == 1.0


def test_gumbel_sample_salts_only_a_drafts_position(seen):
    fixed = value(seen, "patched", "gumbel-draft-stream")
    assert fixed["equal_to_salted"] == 1.0
    assert fixed["equal_to_unsalted"] < 0.5
    assert fixed["flag_off_is_0271"] == 1.0
    assert "is_drafting" in seen["pristine"]["gumbel-draft-stream"]["error"]


def test_the_dflash2_walk_draws_on_the_drafts_stream_where_vllm_has_one(seen):
    fixed = value(seen, "patched", "walk-draws")
    assert fixed["equal_to_salted_stream"] == 1.0
    assert fixed["equal_to_verification_stream"] < 0.6
    # With the DFlash2 PR's edits alone the walk draws as 0.28.0's: with the
    # noise verification resamples with.
    unfixed = value(seen, "only_pr", "walk-draws")
    assert unfixed["equal_to_verification_stream"] == 1.0
