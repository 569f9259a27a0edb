"""Interval statistics for results over seeds: a mean's Student-t interval, a strategy's gap to global
shuffling paired seed by seed, the one rule for "reaches global shuffling", and Pearson's and
Spearman's correlations. The accuracy study (study.py) and tune-q (tune.py) both use them; neither
owns them.

**Reaches GS** is an equivalence test: the lower end of the 90 % interval of the seed-paired gap
(candidate − global, seed by seed) is ≥ −δ (EQUIVALENCE_MARGIN, 1 point by default). That is the
lower half of a two one-sided tests procedure at 5 %: the seeds show the candidate at most δ below
GS. A candidate that beats GS reaches it too. A wide interval does not pass by containing 0, and a
tight one a little below 0 is not failed for it. Runs of one seed share the model's initialisation
and the plan's draws, so the pairing removes that part of the noise.
"""

from __future__ import annotations

import math
import statistics

from scipy import stats


def spread(values: list[float]) -> dict:
    """n, min, median and max of `values` (one per repeat): what a few repeats of a measurement say."""
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


def interval(values: list[float], what: str, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` (one per seed) and its two-sided Student-t interval at
    `level` (scipy.stats' exact quantile for len(values) - 1 degrees of freedom)."""
    if len(values) < 2:
        raise ValueError(
            f"a {level * 100:.0f} % interval of {what} needs at least 2 seeds, got {len(values)}: "
            "run more seeds (e.g. seed=0,1,2, or --seeds 3 for experiments/accuracy_study.py)"
        )
    mean = statistics.fmean(values)
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def interval95(values: list[float], what: str) -> tuple[float, float, float]:
    """`interval` at 95 %, the level every table shows a mean with."""
    return interval(values, what, 0.95)


REACH_LEVEL = 0.90  # the paired gap's interval the rule reads: its lower end is a one-sided 95 % bound
EQUIVALENCE_MARGIN = 1.0  # δ, points: how far below GS a candidate may be and still reach it
REACH_RULE = f"paired gap's {REACH_LEVEL * 100:.0f} % interval ends above -{EQUIVALENCE_MARGIN:g}"  # as tables say it


def paired_gap(scores: dict[int, float], reference: dict[int, float], what: str,
               level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, low, high, seeds) of `scores` − `reference` over the seeds both have ({seed: score}), with
    the mean's interval at `level`; ValueError below 2 shared seeds."""
    shared = sorted(set(scores) & set(reference))
    mean, low, high = interval([scores[seed] - reference[seed] for seed in shared], f"{what} (seeds both ran)", level)
    return mean, low, high, len(shared)


def reaches_global(gap_ci90: tuple[float, float], margin: float = EQUIVALENCE_MARGIN) -> bool:
    """The one rule (module doc): the lower end of the seed-paired gap's REACH_LEVEL interval is ≥ −margin."""
    return gap_ci90[0] >= -margin


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
