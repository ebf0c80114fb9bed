"""What the numpy model of 0.27.1's verification (tests/block_verification_model.py)
shows: a position drafted again after a truncated block reuses draws that
block verification already decided with, which biases the output; keyed by
the draft step too, as vLLM 0.33.0 keys them, the output follows the
target; standard verification is unbiased either way. The runtime chi-square
(tests/runtime/test_runtime_step_seed.py) shows the same through 0.27.1's
own kernels."""

from __future__ import annotations

import pytest

from tests.block_verification_model import (
    DRAFT_LOGITS,
    TARGET_LOGITS,
    chi_square,
    iid,
    run,
    threshold,
    softmax,
)

TRIALS = 20_000
TARGET, DRAFT = iid(TARGET_LOGITS), iid(DRAFT_LOGITS)


def statistic(block: bool, mix: bool, target=TARGET, draft=DRAFT, k: int = 2,
              n: int = 2) -> tuple[float, int]:
    kept = run(target, draft, k, TRIALS, n, block=block, mix_uniform=mix, mix_draft=mix, seed=5)
    return chi_square(kept, target, n)


def test_block_verification_of_reused_draws_is_biased() -> None:
    value, dof = statistic(block=True, mix=False)
    assert value > 10 * threshold(dof)


def test_block_verification_with_the_draft_step_in_every_key_follows_the_target() -> None:
    value, dof = statistic(block=True, mix=True)
    assert value < threshold(dof)


@pytest.mark.parametrize("mix", [False, True], ids=["reused", "step mixed"])
def test_standard_verification_follows_the_target_either_way(mix: bool) -> None:
    value, dof = statistic(block=False, mix=mix)
    assert value < threshold(dof)


def test_a_markov_target_and_draft_over_three_steps_show_the_same() -> None:
    import numpy as np

    generator = np.random.default_rng(11)
    target = softmax(generator.normal(size=(3, 3)) * 1.5)
    draft = softmax(generator.normal(size=(3, 3)) * 1.5)
    biased, dof = statistic(block=True, mix=False, target=target, draft=draft, k=3, n=3)
    unbiased, _ = statistic(block=True, mix=True, target=target, draft=draft, k=3, n=3)
    assert unbiased < threshold(dof) < biased
