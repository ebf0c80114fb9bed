"""A DFlash draft pass never has more query rows than its buffers hold: at
most max_num_batched_tokens // (K + 1) requests run at once.

The engine is sized as a GPU server may be (K = 8, max_num_seqs = 1024,
max_num_batched_tokens = 8192) and given 1000 one-token prompts at once.
0.27.1 reserves (K - 1) * max_num_seqs = 7168 of those tokens for
parallel drafting, which leaves 1024 scheduled tokens: its own scheduler
takes all 1000 requests in one step, and the DFlash draft pass then needs
1000 * 9 = 9000 query rows in input buffers of 8192. Run through 0.27.1's
own prepare-inputs kernel, those rows land past the buffers' end. With the
fix, `max_num_seqs` is 8192 // 9 = 910: the scheduler takes 910 requests,
8190 rows, and nothing is written past the end.

The same cap sizes the runner, so its memory-profiling dummy run, which no
scheduler sizes, holds 2048 // 5 = 409 requests at upstream 0.34.0's test
shape (K = 4, 512 requests, 2048 tokens), where 0.34.0 caps in the runner.

Observed in 0.27.1 as it ships (a DFlash1 draft, and a DFlash2 draft
aliased to DFlash1's class), patched by `apply --only-pr` and by `apply`
(venv_side/draft_seqs_probe.py).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.runtime

K, MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS = 8, 1024, 8192
PROMPTS = 1000
SIZES = {"k": K, "max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS}
#: What a step may hold: 8192 // 9.
CAPPED = 910
#: The shape of upstream 0.34.0's test of its runner-level cap
#: (test_dummy_run_caps_parallel_draft_requests): 2048 // (4 + 1) = 409.
DUMMY_SIZES = {"k": 4, "max_num_seqs": 512, "max_num_batched_tokens": 2048}
DUMMY_CAPPED = 409
DRAFTS = ("dflash2", "dflash1-full")
UNFIXED = ("pristine", "only-pr")


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons, tiny_models) -> dict[str, dict]:
    code = "import sys, json, draft_seqs_probe; draft_seqs_probe.main(json.loads(sys.argv[1]))"
    request = {"models": {k: str(v) for k, v in tiny_models.items()}, "sizes": SIZES,
               "dummy_sizes": DUMMY_SIZES, "prompts": PROMPTS}
    names = list(edit_set_pythons)
    runs = [snippets.start(edit_set_pythons[name], code, args=[json.dumps(request)],
                           timeout=900) for name in names]
    results = dict(zip(names, snippets.gather(runs)))
    for name, result in results.items():
        print(name, json.dumps(result)[:2000])
    return results


def value(seen: dict, tree: str, *keys: str):
    found = seen[tree]
    for key in keys:
        found = found[key]
    assert found["ok"], (tree, keys, found)
    return found["value"]


@pytest.mark.parametrize("draft", DRAFTS)
def test_a_dflash_draft_caps_max_num_seqs_to_the_rows_of_its_draft_pass(seen, draft):
    patched = value(seen, "patched", draft, "engine")
    assert patched["max_num_seqs"] == CAPPED
    assert patched["max_num_batched_tokens"] == MAX_NUM_BATCHED_TOKENS
    # The reservation counts the requests that can run: 8192 - 7 * 910.
    assert patched["max_num_scheduled_tokens"] == MAX_NUM_BATCHED_TOKENS - (K - 1) * CAPPED
    for tree in UNFIXED:
        unfixed = value(seen, tree, draft, "engine")
        assert unfixed["max_num_seqs"] == MAX_NUM_SEQS, tree
        assert unfixed["max_num_scheduled_tokens"] == 1024, tree


@pytest.mark.parametrize("draft", DRAFTS)
def test_a_burst_of_short_prompts_schedules_no_more_requests_than_the_draft_pass_holds(
    seen, draft
):
    patched = value(seen, "patched", draft, "schedule")
    assert patched["requests"] == CAPPED
    assert patched["requests"] * (K + 1) <= MAX_NUM_BATCHED_TOKENS
    for tree in UNFIXED:
        unfixed = value(seen, tree, draft, "schedule")
        assert unfixed["requests"] == PROMPTS, tree
        assert unfixed["requests"] * (K + 1) > MAX_NUM_BATCHED_TOKENS, tree


def test_the_prepare_inputs_kernel_writes_past_the_draft_buffers_without_the_cap(seen):
    assert value(seen, "patched", "prepare") == {
        "input_ids": 0, "positions": 0, "query_slots": 0
    }
    past = PROMPTS * (K + 1) - MAX_NUM_BATCHED_TOKENS
    for tree in UNFIXED:
        written = value(seen, tree, "prepare")
        assert written["input_ids"] == past, (tree, written)
        assert written["positions"] == past, (tree, written)


def test_the_profile_dummy_run_of_an_engine_built_the_normal_way_holds_no_more_requests(seen):
    # 0.34.0 caps the dummy run in the runner, because its config leaves
    # max_num_seqs alone; here the config's cap sizes the runner, so the
    # runner's own dummy run, unchanged, makes the capped batch.
    assert value(seen, "patched", "dummy_run") == {
        "requests": DUMMY_CAPPED, "tokens": DUMMY_SIZES["max_num_batched_tokens"]}
    for tree in UNFIXED:
        assert value(seen, tree, "dummy_run")["requests"] == DUMMY_SIZES["max_num_seqs"], tree
