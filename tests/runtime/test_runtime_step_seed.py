"""Probabilistic DFlash2 drafting with block verification is unbiased over
several engine steps with the per-step seed, and biased without it.

Each trial is a request through two engine steps, each drafting two tokens
with the DFlash2 walk and verifying them with the release's `rejection_sample`
(`use_block_verification=True`), the draft-logit cache written as the
speculator writes it (venv_side/step_seed_probe.py, Triton's interpreter).
When the first block keeps fewer than two drafts, the second step drafts and
verifies positions the first already decided, with draws keyed by the same
positions. The first two tokens kept must be independent draws of the
target's softmax: Pearson's statistic against their product, 3 degrees of
freedom, against upstream's bound.

The pair below is the one the numpy model of the same verification
(tests/block_verification_model.py) shows at about 0.07 of chi-square per
trial with the draws reused and none with the step mixed in; most of it is
the acceptance uniform, so the walk's own mixing is held by a test of its
draws (a position drafted at step 1 and then at step 0 draws afresh).

Three trees of each release the edits take a form for (0.27.1, 0.26.0;
`edit_set_pythons`): patched by `apply`; the same with `spec_step_seed`
replaced by the request's seed in the rejection sampler and in the DFlash2
walk before any kernel runs (every other fix in place, so the difference is
the per-step seed alone); and patched by `apply --only-pr` (0.28.0's
behaviour). About a minute of CPU in Triton's interpreter per chi-square
(three without runtime_guest's interpreter shortcuts); the three run side
by side.
"""

from __future__ import annotations

import json

import pytest

from tests.block_verification_model import DRAFT_LOGITS, TARGET_LOGITS, threshold

pytestmark = pytest.mark.runtime

TRIALS = 1500
CHI2 = {"target": TARGET_LOGITS, "draft": DRAFT_LOGITS, "trials": TRIALS}
UNMIXED = ["uniform", "walk"]


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons) -> dict[str, dict]:
    code = "import sys, json, step_seed_probe; step_seed_probe.main(json.loads(sys.argv[1]))"
    runs = {
        "patched": (edit_set_pythons["patched"], {}),
        "patched-unmixed": (edit_set_pythons["patched"], {"unmix": UNMIXED}),
        "only-pr": (edit_set_pythons["only-pr"], {}),
    }
    started = {
        name: snippets.start(python, code, timeout=1200, args=[json.dumps({"checks": {
            "walk": ["redrafted_walk", options],
            "chi2": ["block_chi_square", {**CHI2, **options}],
        }})])
        for name, (python, options) in runs.items()
    }
    results = dict(zip(started, snippets.gather(list(started.values()))))
    for name, result in results.items():
        for check in result.values():
            assert check["ok"], (name, check["error"])
        print(name, {check: result[check]["value"] for check in result})
    return {name: {check: result[check]["value"] for check in result}
            for name, result in results.items()}


def test_the_unmixed_run_had_both_draws_put_back_on_the_request_seed(seen) -> None:
    assert seen["patched-unmixed"]["chi2"]["unmixed"] == UNMIXED
    assert seen["patched-unmixed"]["walk"]["unmixed"] == UNMIXED
    assert seen["patched"]["chi2"]["unmixed"] == []


def test_first_blocks_were_truncated_so_positions_were_drafted_again(seen) -> None:
    for name, result in seen.items():
        assert result["chi2"]["truncated_first_blocks"] > TRIALS // 4, name


def test_the_walk_draws_a_position_drafted_again_at_another_step_afresh(seen) -> None:
    # Eight candidates with random scores: the same token both times by
    # chance, not always.
    assert seen["patched"]["walk"]["same_token"] < 0.6
    assert seen["patched-unmixed"]["walk"]["same_token"] == 1.0
    assert seen["only-pr"]["walk"]["same_token"] == 1.0


def test_block_verified_tokens_follow_the_target_with_the_per_step_seed(seen) -> None:
    chi2 = seen["patched"]["chi2"]
    assert chi2["statistic"] < threshold(chi2["dof"]), chi2


@pytest.mark.parametrize("tree", ["patched-unmixed", "only-pr"])
def test_and_do_not_without_it(seen, tree: str) -> None:
    chi2 = seen[tree]["chi2"]
    assert chi2["statistic"] > threshold(chi2["dof"]), chi2
