"""Probabilistic DFlash2 drafting through the verification of vLLM 0.27.1
and of 0.26.0 is unbiased with the draft noise stream, and biased without
it.

Each trial drafts one token with the DFlash2 walk (every token of a small
vocabulary a candidate, the draft distribution's logits as the walk's
scores), caches the walked distribution as the speculator does, and runs
the release's `rejection_sample` on it: the token it keeps must follow the
target's softmax. Without the salt the walk draws the very noise the
rejection sampler resamples with after rejecting it, and the output leans
away from the tokens the draft ranks high. The pair below was chosen by a
torch simulation of the coupled sampler for a large bias per sample (about
0.026 of chi-square per trial): at 2500 trials it stands well above
upstream's threshold, in about half a minute of CPU in Triton's interpreter
per venv (the two run side by side).

The unfixed state is the release patched with the DFlash2 PR's edits alone
(as it ships it has no DFlash2 walk); it draws as upstream 0.28.0 does.
"""

from __future__ import annotations

import json
import math

import pytest

pytestmark = pytest.mark.runtime

TARGET = [0.97, 1.72, -0.54]
DRAFT = [-2.58, 0.41, 0.85]
TRIALS = 2500


def threshold(dof: int) -> float:
    """Upstream's (0.29.0's unbiasedness test): about ten standard deviations."""
    return dof + 10 * math.sqrt(2 * dof)


@pytest.fixture(scope="module")
def statistics(snippets, edit_set_pythons):
    code = "import closure_probe, sys, json; closure_probe.main(json.loads(sys.argv[1]))"
    request = {"checks": {"chi2": ["walk_chi_square",
                                   {"target": TARGET, "draft": DRAFT, "trials": TRIALS}]}}
    runs = [snippets.start(python, code, args=[json.dumps(request)], timeout=900)
            for python in (edit_set_pythons["patched"], edit_set_pythons["only-pr"])]
    seen = {}
    for venv, result in zip(("patched", "only_pr"), snippets.gather(runs)):
        assert result["chi2"]["ok"], result["chi2"]["error"]
        seen[venv] = result["chi2"]["value"]
        print(venv, seen[venv])
    return seen


def test_the_drafts_themselves_follow_the_draft_distribution_either_way(statistics):
    # The walk samples right in both trees: the bias is verification's.
    for seen in statistics.values():
        assert seen["drafted_follows_draft"] < threshold(seen["dof"]), seen


def test_verified_tokens_follow_the_target_with_the_draft_noise_stream(statistics):
    seen = statistics["patched"]
    assert seen["statistic"] < threshold(seen["dof"]), seen


def test_and_do_not_without_it(statistics):
    seen = statistics["only_pr"]
    assert seen["statistic"] > threshold(seen["dof"]), seen
