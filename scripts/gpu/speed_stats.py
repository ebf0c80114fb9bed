"""Medians, speedups and their ratio with bootstrap intervals, for timing
runs made of rounds of repetitions.

Each sample is a list of rounds, each round a list of repetitions (one
engine's figures in one process). Rounds differ by more than their
repetitions do (a process's start leaves the machine in a state that lasts
through its repetitions), so the bootstrap is two-stage: it draws the rounds
with replacement, then each drawn round's repetitions with replacement, and
takes the median of the pooled resample. A version that was fast in one round
and slow in the next thus gets an interval that spans both. Intervals are the
2.5th and 97.5th percentiles; a verdict needs at least two rounds of every
engine, since one round says nothing of the spread between rounds.
"""

from __future__ import annotations

import numpy as np

Rounds = list[list[float]]
FLOOR = 0.97
MAX_HALF_WIDTH = 0.03
MIN_ROUNDS = 2
RESAMPLES = 10000


def pooled_median(rounds: Rounds) -> float:
    return float(np.median(np.concatenate([np.asarray(r, float) for r in rounds])))


def bootstrap_medians(rounds: Rounds, rng: np.random.Generator,
                      resamples: int = RESAMPLES) -> np.ndarray:
    """One median per resample: rounds drawn with replacement, then each
    drawn round's repetitions, as many as it has."""
    kept = [np.asarray(r, float) for r in rounds if len(r)]
    if not kept:
        raise ValueError("no repetitions")
    picks = rng.integers(0, len(kept), (resamples, len(kept)))
    medians = np.empty(resamples)
    # Resamples that drew the same rounds share one array shape; grouping by
    # the draw keeps the work in numpy.
    draws, inverse = np.unique(np.sort(picks, axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    by_draw = np.split(np.argsort(inverse, kind="stable"),
                       np.cumsum(np.bincount(inverse, minlength=len(draws)))[:-1])
    for draw, rows in zip(draws, by_draw):
        pooled = np.concatenate(
            [kept[r][rng.integers(0, kept[r].size, (rows.size, kept[r].size))]
             for r in draw], axis=1)
        medians[rows] = np.median(pooled, axis=1)
    return medians


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
    return _judged(_interval(ours / theirs, ours_draws / their_draws),
                   (ours_base, ours_spec, up_base, up_spec))


def paired_ratio_of_speedups(base_pairs: Rounds, spec_pairs: Rounds, seed: int = 0) -> dict:
    """The same ratio from paired runs, where each figure is ours / upstream's
    of two cycles run back to back: the median of the DFlash2 pairs over the
    median of the no-speculation pairs. A slow spell of the machine that
    falls on both cycles of a pair drops out of it."""
    rng = np.random.default_rng(seed)
    found = _judged(_interval(*_speedup(base_pairs, spec_pairs, rng)), (base_pairs, spec_pairs))
    found["paired"] = True
    return found


def _judged(found: dict, samples) -> dict:
    found["half_width"] = half_width(found)
    found["rounds"] = min(sum(1 for r in rounds if len(r)) for rounds in samples)
    found["verdict"] = verdict(found)
    return found


def half_width(interval: dict) -> float:
    """Half the interval's width, relative to its point."""
    return (interval["hi"] - interval["lo"]) / 2 / interval["point"]


def verdict(interval: dict, floor: float = FLOOR,
            max_half_width: float = MAX_HALF_WIDTH, min_rounds: int = MIN_ROUNDS) -> str:
    """PASS: the interval lies above `floor` and is within +-max_half_width;
    an interval wider than that, or from fewer rounds than `min_rounds`,
    settles nothing either way."""
    if half_width(interval) > max_half_width or interval.get("rounds", min_rounds) < min_rounds:
        return "INCONCLUSIVE"
    return "PASS" if interval["lo"] > floor else "FAIL"
