"""Medians, speedups and their ratio with bootstrap intervals, for timing
runs made of rounds of repetitions.

Each sample is a list of rounds, each round a list of repetitions (one
engine's figures in one process). The bootstrap resamples repetitions within
each round, keeping every round's count, so that a slow round weighs on every
resample as it weighs on the data, and takes the median of the pooled
resample; intervals are the 2.5th and 97.5th percentiles.
"""

from __future__ import annotations

import numpy as np

Rounds = list[list[float]]
FLOOR = 0.97
MAX_HALF_WIDTH = 0.03
RESAMPLES = 10000


def pooled_median(rounds: Rounds) -> float:
    return float(np.median(np.concatenate([np.asarray(r, float) for r in rounds])))


def bootstrap_medians(rounds: Rounds, rng: np.random.Generator,
                      resamples: int = RESAMPLES) -> np.ndarray:
    """One median per resample; repetitions are drawn within their round."""
    drawn = []
    for values in rounds:
        values = np.asarray(values, float)
        if values.size:
            drawn.append(values[rng.integers(0, values.size, (resamples, values.size))])
    if not drawn:
        raise ValueError("no repetitions")
    return np.median(np.concatenate(drawn, axis=1), axis=1)


def _interval(point: float, draws: np.ndarray) -> dict:
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return {"point": point, "lo": float(lo), "hi": float(hi)}


def median_interval(rounds: Rounds, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return _interval(pooled_median(rounds), bootstrap_medians(rounds, rng))


def _speedup(base: Rounds, spec: Rounds, rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Median with speculation over median without: the point and its draws."""
    draws = bootstrap_medians(spec, rng) / bootstrap_medians(base, rng)
    return pooled_median(spec) / pooled_median(base), draws


def speedup_interval(base: Rounds, spec: Rounds, seed: int = 0) -> dict:
    return _interval(*_speedup(base, spec, np.random.default_rng(seed)))


def ratio_of_speedups(ours_base: Rounds, ours_spec: Rounds, up_base: Rounds,
                      up_spec: Rounds, seed: int = 0) -> dict:
    """(ours_spec / ours_base) / (up_spec / up_base), each engine resampled
    on its own."""
    rng = np.random.default_rng(seed)
    ours, ours_draws = _speedup(ours_base, ours_spec, rng)
    theirs, their_draws = _speedup(up_base, up_spec, rng)
    found = _interval(ours / theirs, ours_draws / their_draws)
    found["half_width"] = half_width(found)
    found["verdict"] = verdict(found)
    return found


def half_width(interval: dict) -> float:
    """Half the interval's width, relative to its point."""
    return (interval["hi"] - interval["lo"]) / 2 / interval["point"]


def verdict(interval: dict, floor: float = FLOOR,
            max_half_width: float = MAX_HALF_WIDTH) -> str:
    """PASS: the interval lies above `floor` and is within +-max_half_width;
    an interval wider than that settles nothing either way."""
    if half_width(interval) > max_half_width:
        return "INCONCLUSIVE"
    return "PASS" if interval["lo"] > floor else "FAIL"
