"""A model, in numpy, of vLLM 0.27.1's speculative verification over several
engine steps, for what reusing a position's random draws does to the output.

Everything a step draws is keyed as 0.27.1 keys it: the drafter's Gumbel
noise for the token at position Q by Q - 1, and the verifier's acceptance
uniform for logit i by that logit's position (its resample draws on a stream
of its own, as the draft-noise-salt fix leaves it). A request's draws are
fixed once per key, so a position drafted again in a later step draws the
very noise and uniform it drew before, unless the draft step is part of the
key (`mix_uniform`, `mix_draft`: vLLM 0.33.0's `spec_step_seed`).

Verification is 0.27.1's `_rejection_kernel` with draft logits cached:
standard (Leviathan et al.: accept while p(x) > u q(x), resample from
max(p - q, 0) at the first rejection) or block (Sun et al., 2024: the
accepted length is the last i whose uniform is under its threshold h_i,
the residual scaled by the running joint ratio), read statement by statement
from 0.27.1's kernel.

The target and the draft are Markov chains over a small vocabulary (rows:
the distribution after each token); with equal rows, i.i.d. tokens. Every
request starts after token 0; the tokens kept must follow the target's
chain, which `chi_square` tests on the first `n` of them.

    python -m tests.block_verification_model    # the figures docs/edits.md cites
"""

from __future__ import annotations

from itertools import product

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def run(target: np.ndarray, draft: np.ndarray, k: int, trials: int, steps: int, *,
        block: bool, mix_uniform: bool, mix_draft: bool, seed: int = 0) -> np.ndarray:
    """`trials` requests through `steps` engine steps of `k` draft tokens;
    returns each request's kept tokens (the first `steps` at least)."""
    rng = np.random.default_rng(seed)
    vocab = target.shape[0]
    span = steps * (k + 1) + 2
    rows = np.arange(trials)
    # One draw per key: by position, or by position and draft step.
    uniform = rng.random((trials, span, k if mix_uniform else 1))
    noise = rng.gumbel(size=(trials, span, k if mix_draft else 1, vocab))
    log_draft = np.log(draft)
    kept = np.zeros((trials, 1 + steps * (k + 1)), dtype=int)
    length = np.ones(trials, dtype=int)
    for _ in range(steps):
        anchor = length - 1
        previous = kept[rows, anchor]
        drafted = np.zeros((trials, k), dtype=int)
        q = np.zeros((trials, k, vocab))
        for j in range(k):
            q[:, j] = draft[previous]
            g = noise[rows, anchor + j, j if mix_draft else 0]
            previous = np.argmax(log_draft[previous] + g, -1)
            drafted[:, j] = previous
        p = target[np.concatenate([kept[rows, anchor][:, None], drafted], 1)]
        accepted = np.zeros(trials, dtype=int)
        if block:
            log_ratio = np.zeros(trials)
            joint = np.zeros((trials, k))
            for i in range(k):
                log_ratio = np.minimum(
                    log_ratio + np.log(p[rows, i, drafted[:, i]] / q[rows, i, drafted[:, i]]), 0
                )
                joint[:, i] = np.exp(log_ratio)
            for i in range(k):
                if i < k - 1:
                    residual = np.maximum(joint[:, i, None] * p[:, i + 1] - q[:, i + 1], 0).sum(-1)
                    denominator = residual + 1 - joint[:, i]
                    h = np.where(denominator > 0, residual / np.where(denominator > 0, denominator, 1), 1.0)
                else:
                    h = joint[:, i]
                u = uniform[rows, anchor + i, i if mix_uniform else 0]
                accepted = np.where(u <= h, i + 1, accepted)
            scale = np.where(accepted > 0, joint[rows, np.maximum(accepted - 1, 0)], 1.0)
        else:
            alive = np.ones(trials, dtype=bool)
            for i in range(k):
                u = uniform[rows, anchor + i, i if mix_uniform else 0]
                alive &= p[rows, i, drafted[:, i]] > u * q[rows, i, drafted[:, i]]
                accepted += alive
            scale = np.ones(trials)
        q_after = np.concatenate([q, np.zeros((trials, 1, vocab))], 1)
        residual = np.maximum(scale[:, None] * p[rows, accepted] - q_after[rows, accepted], 0)
        residual = np.where(accepted[:, None] == k, p[:, k], residual)
        residual = np.where(residual.sum(-1, keepdims=True) > 0, residual, p[rows, accepted])
        with np.errstate(divide="ignore"):
            resampled = np.argmax(np.log(residual) + rng.gumbel(size=(trials, vocab)), -1)
        for i in range(k):
            take = i < accepted
            kept[rows[take], length[take] + i] = drafted[take, i]
        kept[rows, length + accepted] = resampled
        length = length + accepted + 1
    return kept[:, 1:]


def chi_square(kept: np.ndarray, target: np.ndarray, n: int) -> tuple[float, int]:
    """Pearson's statistic of the first `n` kept tokens against the target's
    chain from token 0, and its degrees of freedom."""
    vocab = target.shape[0]
    index = np.zeros(kept.shape[0], dtype=int)
    for position in range(n):
        index = index * vocab + kept[:, position]
    observed = np.bincount(index, minlength=vocab**n)
    expected = np.empty(vocab**n)
    for cell, tokens in enumerate(product(range(vocab), repeat=n)):
        probability, previous = 1.0, 0
        for token in tokens:
            probability *= target[previous, token]
            previous = token
        expected[cell] = probability * kept.shape[0]
    return float(((observed - expected) ** 2 / expected).sum()), vocab**n - 1


def threshold(dof: int) -> float:
    """Upstream's bound (0.29.0's unbiasedness test): about ten standard deviations."""
    return dof + 10 * (2 * dof) ** 0.5


#: The pair the runtime chi-square uses: i.i.d. tokens, a draft that almost
#: always proposes token 1, a target that often wants token 0.
TARGET_LOGITS = [-0.953, -0.487]
DRAFT_LOGITS = [-4.347, -0.013]


def iid(logits) -> np.ndarray:
    row = softmax(np.array(logits, dtype=float))
    return np.repeat(row[None], row.size, 0)


def main() -> None:
    target, draft = iid(TARGET_LOGITS), iid(DRAFT_LOGITS)
    trials = 200_000
    print(f"{trials} requests, 2 steps of 2 draft tokens; chi-square of the first 2 kept "
          f"tokens (3 dof, bound {threshold(3):.1f})")
    for block in (True, False):
        for mix_uniform, mix_draft in ((False, False), (True, True), (True, False), (False, True)):
            kept = run(target, draft, 2, trials, 2, block=block, mix_uniform=mix_uniform,
                       mix_draft=mix_draft, seed=1)
            statistic, _ = chi_square(kept, target, 2)
            print(f"  {'block' if block else 'standard'} verification, step mixed into "
                  f"uniform={mix_uniform!s:5} draft={mix_draft!s:5}: {statistic:9.1f}")


if __name__ == "__main__":
    main()
