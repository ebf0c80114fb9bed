"""How far drafting with verification's noise biases the output, and whether
the driver's chi-square test can see it (a CPU simulation; numpy and scipy).

    python3 scripts/gpu/prob_power.py

One drafted position after a cycle token, reduced to the four cycle tokens
the DFlash2 walk chooses among (the successor s and three others) and one
REST token for the rest of the vocabulary: the maximum of independent
Gumbels over a set is one Gumbel over its summed probability, and no draft
noise touches REST, so the reduction is exact. The draft takes the argmax of
log q + g; verification keeps it with probability min(1, p/q), else
resamples from max(p - q, 0) with the noise g again on the candidates
(coupled, 0.27.1 with the PR alone, 0.28.0) or with fresh noise (the draft
noise stream of #54282).

The target's p(s) = 0.72 at T 0.7 is what the tiny checkpoints' counters
showed on the H200 (about 72% of first drafts accepted with a draft that
nearly always proposes s). At T 1.3 p(s) is about 0.01: below any q(s), the
residual then has no s, nothing is coupled, and there is no bias to see.

Prints, per draft probability q(s): the output's P(s) both ways and the power
of the driver's test (two-sample chi-square homogeneity, p < 0.001) at 2000,
4000 and 8000 requests per arm, first for the position alone, then mixed with
the 28% of requests whose previous token left the cycle (the first drafted
position of the driver's sampled prompt).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2

P_SUCCESSOR = 0.72
OTHER_CYCLE = 1e-3
P_THRESHOLD = 1e-3
rng = np.random.default_rng(0)


def output_distribution(p, q, coupled: bool, n: int = 400_000) -> np.ndarray:
    k = len(q)
    g = rng.gumbel(size=(n, k))
    drafted = np.argmax(np.log(q) + g, axis=1)
    accept = rng.random(n) < np.minimum(1, p[drafted] / q[drafted])
    residual = np.append(np.maximum(p[:k] - q, 0), p[k])
    again = g if coupled else rng.gumbel(size=(n, k))
    again = np.concatenate([again, rng.gumbel(size=(n, 1))], axis=1)
    with np.errstate(divide="ignore"):
        resampled = np.argmax(np.log(residual) + again, axis=1)
    tokens = np.where(accept, drafted, resampled)
    return np.bincount(tokens, minlength=k + 1) / n


def power(a, b, n: int, repeats: int = 300) -> float:
    """How often the driver's test tells samples of a and b apart."""
    hits = 0
    for _ in range(repeats):
        ca, cb = rng.multinomial(n, a), rng.multinomial(n, b)
        keep = (ca + cb) >= 10
        table = np.array([ca[keep], cb[keep]], float)
        expected = table.sum(0, keepdims=True) * table.sum(1, keepdims=True) / table.sum()
        statistic = ((table - expected) ** 2 / expected).sum()
        hits += chi2.sf(statistic, keep.sum() - 1) < P_THRESHOLD
    return hits / repeats


def off_cycle(x):
    """The position's distribution when 28% of the previous tokens left the cycle."""
    left = np.array([OTHER_CYCLE] * 4 + [1 - 4 * OTHER_CYCLE])
    return P_SUCCESSOR * x + (1 - P_SUCCESSOR) * left


def main() -> None:
    p = np.array([P_SUCCESSOR, *[OTHER_CYCLE] * 3, 1 - P_SUCCESSOR - 3 * OTHER_CYCLE])
    for label, view in (("after a cycle token", lambda x: x),
                        ("first drafted position", off_cycle)):
        print(f"-- {label}")
        for q_s in (0.3, 0.35, 0.45, 0.6, 0.65, 0.8, 0.95):
            q = np.array([q_s, *[(1 - q_s) / 3] * 3])
            coupled = view(output_distribution(p, q, True))
            fresh = view(output_distribution(p, q, False))
            powers = " ".join(f"n={n}: {power(coupled, fresh, n):.2f}"
                              for n in (2000, 4000, 8000))
            print(f"q(s)={q_s:.2f}: P(s) coupled {coupled[0]:.3f}, fresh noise "
                  f"{fresh[0]:.3f}; power {powers}")


if __name__ == "__main__":
    main()
