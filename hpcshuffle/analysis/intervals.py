"""Interval statistics for results over seeds: a mean's 95 % Student-t interval, a strategy's gap to
global shuffling paired seed by seed, the one rule for "reaches global shuffling", and Pearson's and
Spearman's correlations. The accuracy study (study.py) and tune-q (tune.py) both use them; neither
owns them.

**Reaches GS** means: the 95 % interval of the seed-paired gap (candidate − global, seed by seed)
reaches −δ, i.e. its upper end is ≥ −δ. With δ = 0 (REACH_TOLERANCE) a candidate reaches GS unless the
seeds show it below GS beyond the noise; one that beats GS reaches it too. Runs of one seed share the
model's initialisation and the plan's draws, so the pairing removes that part of the noise.
"""

from __future__ import annotations

import math
import statistics

from scipy import stats


def interval95(values: list[float], what: str) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` (one per seed) and its 95 % Student-t interval
    (scipy.stats' exact quantile for len(values) - 1 degrees of freedom)."""
    if len(values) < 2:
        raise ValueError(
            f"a 95 % interval of {what} needs at least 2 seeds, got {len(values)}: "
            "run more seeds (e.g. seed=0,1,2, or --seeds 3 for experiments/accuracy_study.py)"
        )
    mean = statistics.fmean(values)
    half = float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


REACH_TOLERANCE = 0.0  # δ, points: how far below 0 a paired gap's interval may end and still reach GS


def paired_gap(scores: dict[int, float], reference: dict[int, float], what: str) -> tuple[float, float, float, int]:
    """(mean, low, high, seeds) of `scores` − `reference` over the seeds both have ({seed: score}), with
    the mean's 95 % interval (interval95); ValueError below 2 shared seeds."""
    shared = sorted(set(scores) & set(reference))
    mean, low, high = interval95([scores[seed] - reference[seed] for seed in shared], f"{what} (seeds both ran)")
    return mean, low, high, len(shared)


def reaches_global(gap_ci95: tuple[float, float], tolerance: float = REACH_TOLERANCE) -> bool:
    """The one rule (module doc): the seed-paired gap's 95 % interval reaches −tolerance."""
    return gap_ci95[1] >= -tolerance


def pearson(xs: list[float], ys: list[float]) -> float:
    """Pearson's correlation of paired runs' values; ValueError for fewer than 3 runs."""
    if len(xs) < 3:
        raise ValueError(f"a correlation needs at least 3 runs, got {len(xs)}")
    return statistics.correlation(xs, ys)


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (Pearson's r of the ranks, ties at their mean rank); ValueError for
    fewer than 3 runs."""
    if len(xs) < 3:
        raise ValueError(f"a correlation needs at least 3 runs, got {len(xs)}")
    return float(stats.spearmanr(xs, ys).statistic)
