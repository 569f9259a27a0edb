"""Interval statistics for results over seeds: a mean's 95 % Student-t interval, whether one interval
reaches another (not below it beyond the noise), and Pearson's r. The accuracy study (study.py) and
tune-q (tune.py) both use them; neither owns them.
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


def reaches(ci95: tuple[float, float], reference: tuple[float, float]) -> bool:
    """Not below the reference beyond the noise: the 95 % interval overlaps the reference's or lies
    above it (a q that beats global shuffling qualifies as much as one that ties it)."""
    return ci95[1] >= reference[0]


def pearson(xs: list[float], ys: list[float]) -> float:
    """Pearson's correlation of paired runs' values; ValueError for fewer than 3 runs."""
    if len(xs) < 3:
        raise ValueError(f"a correlation needs at least 3 runs, got {len(xs)}")
    return statistics.correlation(xs, ys)
