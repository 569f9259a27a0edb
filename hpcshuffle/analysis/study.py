"""The accuracy study: does a strategy lose accuracy beyond the noise, and does shuffle quality say how much?

Input is the summary rows of a results tree (`hpcshuffle.analysis.report.collect`), one run per
(partition, workers, strategy, q, seed). Per point the final top-1 is averaged over seeds with a
95 % Student-t interval; a strategy's gap to global shuffling is taken seed by seed (runs of one
seed share the model's initialisation and the plan's random draws, so the pairing removes that
part of the noise) and gets its own intervals; a strategy reaches global shuffling where the lower
end of that gap's 90 % interval is at most δ below 0 (intervals.reaches_global, the one rule: an
equivalence test). Every run's gap is set against its final
`mixing` quality and label skew to see whether the measures predict the loss: Pearson's r and
Spearman's ρ, over all runs, within each partition and within each strategy family.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hpcshuffle.analysis.intervals import (
    EQUIVALENCE_MARGIN,
    REACH_LEVEL,
    REACH_RULE,
    interval95,
    paired_gap,
    pearson,
    reaches_global,
    spearman,
)
from hpcshuffle.analysis.tune import CANDIDATES, run_q
from hpcshuffle.plan import with_role


@dataclass
class Point:
    """One (partition, workers, strategy, q) over its seeds."""

    partition: str
    workers: int
    strategy: str
    q: float
    seeds: list[int]
    top1: list[float]  # final top-1 per seed, in `seeds` order
    mixing: list[float | None]
    top1_mean: float
    ci95: tuple[float, float]

    def row(self) -> dict:
        """The point as results/ records it: its cell, the mean and 95 % interval, per-seed scores (rounded)."""
        return {"partition": self.partition, "workers": self.workers, "strategy": self.strategy, "q": self.q,
                "top1_mean": round(self.top1_mean, 3), "ci95": [round(v, 3) for v in self.ci95],
                "seeds": self.seeds, "top1": [round(v, 3) for v in self.top1],
                "mixing_mean": _rounded_mean(self.mixing)}


def _rounded_mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.fmean(known), 4) if known else None


def points(rows: list[dict]) -> list[Point]:
    """The study's points from complete runs' summary rows, sorted by (partition, workers, q, strategy)."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        if not row["complete"] or row["final_score"] is None:
            continue
        key = (row.get("partition") or "random", row["workers"], row["shuffle"], round(run_q(row), 6))
        cells.setdefault(key, []).append(row)
    found = []
    for (partition, workers, strategy, q), runs in sorted(cells.items(), key=lambda item: (*item[0][:2], item[0][3],
                                                                                          item[0][2])):
        seeds = [run["seed"] for run in runs]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"{partition} M={workers} {strategy} q={q:g} has two runs of one seed "
                             f"({sorted(seeds)}): keep one run per seed in the results tree")
        runs = sorted(runs, key=lambda run: run["seed"])
        top1 = [run["final_score"] for run in runs]
        mean, low, high = interval95(top1, f"{partition} M={workers} {strategy} q={q:g}")
        found.append(Point(partition, workers, strategy, q, sorted(seeds), top1,
                           [run.get("mixing") for run in runs], mean, (low, high)))
    return found


@dataclass
class Gap:
    """A strategy's final top-1 minus global shuffling's, seed by seed, at one (partition, workers)."""

    point: Point
    mean: float
    ci95: tuple[float, float]
    ci90: tuple[float, float]  # REACH_LEVEL's, which the rule reads

    @property
    def excludes_zero(self) -> bool:
        """Whether the gap's 95 % interval lies wholly above or below 0."""
        return self.ci95[1] < 0 or self.ci95[0] > 0

    @property
    def reaches_global(self) -> bool:
        """The one rule: the 90 % interval's lower end at most δ below 0 (intervals.reaches_global)."""
        return reaches_global(self.ci90)

    def row(self) -> dict:
        """The gap as results/ records it."""
        return {"partition": self.point.partition, "workers": self.point.workers, "strategy": self.point.strategy,
                "q": self.point.q, "gap_mean": round(self.mean, 3), "ci95": [round(v, 3) for v in self.ci95],
                "ci90": [round(v, 3) for v in self.ci90], "reaches_global": self.reaches_global}


def gaps(found: list[Point]) -> list[Gap]:
    """Every non-reference point's paired gap to the reference (global) point of its (partition, workers)."""
    reference = with_role("reference").name
    references = {(p.partition, p.workers): p for p in found if p.strategy == reference}
    result = []
    for point in found:
        base = references.get((point.partition, point.workers))
        if point.strategy == reference or base is None:
            continue
        mine, theirs = dict(zip(point.seeds, point.top1)), dict(zip(base.seeds, base.top1))
        what = f"the gap of {point.strategy} q={point.q:g} to {reference} at {point.partition} M={point.workers}"
        mean, low, high, _ = paired_gap(mine, theirs, what)
        _, low90, high90, _ = paired_gap(mine, theirs, what, REACH_LEVEL)
        result.append(Gap(point, mean, (low, high), (low90, high90)))
    return result


def smallest_reaching_q(all_gaps: list[Gap], partition: str, workers: int) -> float | None:
    """The smallest q on the q axis (local, partial) that reaches global shuffling at (partition, workers):
    its seed-paired gap's 90 % interval ends at most δ below 0 (`reaches_global`); None when none does."""
    reaching = [g.point.q for g in all_gaps if (g.point.partition, g.point.workers) == (partition, workers)
                and g.point.strategy in CANDIDATES and g.reaches_global]
    return min(reaching) if reaching else None


def quality_vs_gap(rows: list[dict], found: list[Point], measure: str = "mixing") -> list[tuple[float, float, str, str, str]]:
    """(the run's `measure`, its paired gap: final top-1 minus global shuffling's at the same (partition,
    workers) and seed, partition, strategy) for every complete run that is not global shuffling's, has a
    global run of its seed, and records `measure`: `mixing` (final pair-mixing quality), `label_skew`
    (final label skew, analysis/labels.py) or `label_skew_early` (its mean over the first quarter of the
    epochs), and the run's name (a run without a partition stands for several partitions' cells)."""
    reference = with_role("reference").name
    global_top1 = {(p.partition, p.workers, seed): top1 for p in found if p.strategy == reference
                   for seed, top1 in zip(p.seeds, p.top1)}
    pairs = []
    for row in rows:
        partition = row.get("partition") or "random"
        base = global_top1.get((partition, row["workers"], row["seed"]))
        if (not row["complete"] or row["shuffle"] == reference or base is None or row.get(measure) is None
                or row["final_score"] is None or run_q(row) is None):
            continue
        pairs.append((row[measure], row["final_score"] - base, partition, row["shuffle"], row["run"]))
    return pairs


def correlation(pairs: list[tuple[float, float, str, str, str]]) -> dict:
    """Pearson's r and Spearman's ρ of measure against gap over all runs, within each partition
    (`by_partition`) and within each strategy family (`by_family`: local, partial, a peer's); a value is
    None below 3 runs or where the measure or the gap is one value throughout (not defined). A run that
    stands for several partitions' cells (one without a partition: a peer's) counts once outside them."""
    def of(xy: list[tuple[float, float]]) -> dict:
        defined = len(xy) >= 3 and not any(len(set(values)) == 1 for values in zip(*xy))
        return {"runs": len(xy), "pearson_r": round(pearson(*zip(*xy)), 3) if defined else None,
                "spearman_rho": round(spearman(*zip(*xy)), 3) if defined else None}

    once = {run: (x, y, family) for x, y, _, family, run in pairs}.values()
    return {**of([(x, y) for x, y, _ in once]),
            "by_partition": {part: of([(x, y) for x, y, p, _, _ in pairs if p == part])
                             for part in sorted({p for _, _, p, _, _ in pairs})},
            "by_family": {family: of([(x, y) for x, y, f in once if f == family])
                          for family in sorted({f for _, _, f in once})}}


MEASURES = {"mixing": "final mixing quality", "label_skew": "final label skew",
            "label_skew_early": "label skew over the first quarter of the epochs"}


def summary(rows: list[dict]) -> dict:
    """`accuracy_study.json`: the points, each (partition, workers)'s local-shuffling gap and
    smallest q whose interval reaches global shuffling's, and the quality-vs-gap correlation."""
    found = points(rows)
    baseline = with_role("baseline").name
    by_cell = []
    all_gaps = gaps(found)
    for partition, workers in sorted({(p.partition, p.workers) for p in found}):
        local = next((g for g in all_gaps if (g.point.partition, g.point.workers, g.point.strategy)
                      == (partition, workers, baseline)), None)
        by_cell.append({
            "partition": partition, "workers": workers,
            "local_gap": None if local is None else round(local.mean, 3),
            "local_gap_ci95": None if local is None else [round(v, 3) for v in local.ci95],
            "local_gap_ci90": None if local is None else [round(v, 3) for v in local.ci90],
            "local_gap_excludes_0": None if local is None else local.excludes_zero,
            "local_reaches_global": None if local is None else local.reaches_global,
            "smallest_q_reaching_global": smallest_reaching_q(all_gaps, partition, workers),
        })
    return {"rows": [p.row() for p in found], "cells": by_cell,
            "reach_rule": {"level": REACH_LEVEL, "margin": EQUIVALENCE_MARGIN},
            "gaps": [g.row() for g in all_gaps],
            "quality_vs_gap": {**correlation(quality_vs_gap(rows, found)),
                               **{measure: correlation(pairs) for measure in ("label_skew", "label_skew_early")
                                  if (pairs := quality_vs_gap(rows, found, measure))}}}


def study_table(result: dict) -> str:
    """The summary as text: points with intervals, then per cell the local gap and the smallest q."""
    lines = [f"{'partition':<11} {'M':>4} {'strategy':<9} {'q':>4} {'top-1 mean':>10} {'95 % interval':>16} "
             f"{'seeds':>5} {'mixing':>7}"]
    for row in result["rows"]:
        low, high = row["ci95"]
        mixing = "-" if row["mixing_mean"] is None else f"{row['mixing_mean']:.3f}"
        lines.append(f"{row['partition']:<11} {row['workers']:>4} {row['strategy']:<9} {row['q']:>4.2g} "
                     f"{row['top1_mean']:>10.2f} {f'[{low:.2f}, {high:.2f}]':>16} {len(row['seeds']):>5} {mixing:>7}")
    lines.append("")
    for cell in result["cells"]:
        head = f"{cell['partition']} M={cell['workers']}: "
        if cell["local_gap"] is None:
            lines.append(head + "no local-vs-global pair of seeds")
            continue
        low, high = cell["local_gap_ci95"]
        verdict = "excludes 0" if cell["local_gap_excludes_0"] else "includes 0"
        q = cell["smallest_q_reaching_global"]
        lines.append(head + f"local - global = {cell['local_gap']:+.2f} points, "
                     f"95 % interval [{low:+.2f}, {high:+.2f}] ({verdict}); smallest q reaching global "
                     f"({REACH_RULE}): {'none' if q is None else f'{q:g}'}")
    corr = result["quality_vs_gap"]
    for measure, what in MEASURES.items():
        found = corr if measure == "mixing" else corr.get(measure)
        if found and found["pearson_r"] is not None:
            lines.append(correlation_line(f"gap to global vs {what}", found))
    return "\n".join(lines)


def correlation_line(what: str, found: dict) -> str:
    """One correlation as the study prints it: Pearson and Spearman overall, then within each partition
    and each strategy family."""
    def pair(entry: dict) -> str:
        if entry["pearson_r"] is None:
            return f"undefined ({entry['runs']} runs)"
        return f"r {entry['pearson_r']:+.2f}, ρ {entry['spearman_rho']:+.2f} ({entry['runs']} runs)"

    within = [f"{name} {pair(entry)}" for group in ("by_partition", "by_family") for name, entry in found[group].items()]
    return f"{what}: {pair(found)}; within " + "; ".join(within)
