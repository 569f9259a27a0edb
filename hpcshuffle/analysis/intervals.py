"""Interval statistics for results over seeds: a mean's 95 % Student-t interval, whether one interval
reaches another (not below it beyond the noise), and Pearson's r. The accuracy study (study.py) and
tune-q (tune.py) both use them; neither owns them.
"""

from __future__ import annotations

import math
import statistics

# Student's t, 97.5 % quantile, for 1..30 degrees of freedom (two-sided 95 % interval)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (a table to 30, then the
    Cornish-Fisher expansion around the normal, within 0.001 of the exact value there)."""
    if df < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def interval95(values: list[float], what: str) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` (one per seed) and its 95 % Student-t interval."""
    if len(values) < 2:
        raise ValueError(
            f"a 95 % interval of {what} needs at least 2 seeds, got {len(values)}: "
            "run more seeds (e.g. seed=0,1,2, or --seeds 3 for experiments/accuracy_study.py)"
        )
    mean = statistics.fmean(values)
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
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
