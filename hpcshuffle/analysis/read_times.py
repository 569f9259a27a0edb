"""Statistics of per-file read times (experiments/storage_latency.py): percentiles, the spread, a
lognormal fitted to the log-moments and whether the measured tail is heavier than its, each point
against k = 1 reader, and the table over repeats."""

from __future__ import annotations

import math
import statistics

Z99, Z90 = 2.3263478740408408, 1.2815515655446004  # standard normal quantiles


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`, linear between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def lognormal_fit(times: list[float]) -> dict:
    """A lognormal fitted to positive `times` by the moments of their logarithms: mu, sigma, and what
    it implies (cv, p50, p90/p50, p99/p50), to hold against the measured spread."""
    if len(times) < 2 or min(times) <= 0:
        raise ValueError("a lognormal fit needs at least two positive times")
    logs = [math.log(t) for t in times]
    mu, sigma = statistics.fmean(logs), statistics.stdev(logs)
    return {"mu": mu, "sigma": sigma, "cv": math.sqrt(math.expm1(sigma * sigma)), "p50_s": math.exp(mu),
            "p90_over_p50": math.exp(Z90 * sigma), "p99_over_p50": math.exp(Z99 * sigma)}


def summarize(times: list[float], window_s: float) -> dict:
    """Per-file read times (seconds) of one point and the wall time they took together: throughput,
    mean, percentiles, spread, the lognormal fit and whether the tail is heavier than the fit's."""
    mean = statistics.fmean(times)
    p50, p99 = percentile(times, 50), percentile(times, 99)
    fit = lognormal_fit(times)
    return {"files": len(times), "window_s": window_s, "files_per_s": len(times) / window_s, "mean_s": mean,
            "p50_s": p50, "p90_s": percentile(times, 90), "p99_s": p99, "max_s": max(times),
            "cv": statistics.pstdev(times) / mean, "p99_over_p50": p99 / p50, "lognormal": fit,
            "tail_heavier_than_lognormal": p99 / p50 > fit["p99_over_p50"]}


def with_ratios(rows: list[dict]) -> list[dict]:
    """`rows` with mean(k)/mean(1) and p99(k)/p99(1), each against the row of k = 1 with the same
    target, node count and repeat (None where that row is missing)."""
    single = {(r["target"], r["nodes"], r["repeat"]): r for r in rows if r["readers"] == 1}
    out = []
    for row in rows:
        base = single.get((row["target"], row["nodes"], row["repeat"]))
        out.append({**row, "mean_over_k1": row["mean_s"] / base["mean_s"] if base else None,
                    "p99_over_k1": row["p99_s"] / base["p99_s"] if base else None})
    return out


def span(values: list[float], fmt: str) -> str:
    """A range over repeats, e.g. `2.31-2.40` (one value when they print the same)."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def table(rows: list[dict]) -> str:
    """The rows (repeats of each point merged into ranges) as printed text."""
    rows = with_ratios(rows)
    points: dict[tuple, list[dict]] = {}
    for row in rows:
        points.setdefault((row["target"], row["nodes"], row["readers"]), []).append(row)
    head = (f"{'target':<18} {'N':>2} {'k':>3} {'files/s':>11} {'mean ms':>11} {'p50 ms':>11} {'p90 ms':>11} "
            f"{'p99 ms':>13} {'max ms':>13} {'cv':>9} {'mean/k1':>9} {'p99/k1':>9} {'LN cv':>9} "
            f"{'p99/p50':>11} {'LN p99/p50':>10}")
    title = ("per-file read times (open + read 100 KB + close) with k reader threads on each of N nodes; each cell "
             "the range over repeats; LN: the lognormal fitted to the log-moments")
    lines = [title, head]
    for (target, nodes, readers), group in sorted(points.items()):
        def cell(key: str, fmt: str, scale: float = 1.0, width: int = 11, source=group) -> str:
            values = [r[key] * scale for r in source if r.get(key) is not None]
            return f"{span(values, fmt) if values else '-':>{width}}"
        lognormal = [{"cv": r["lognormal"]["cv"], "ratio": r["lognormal"]["p99_over_p50"]} for r in group]
        lines.append(f"{target:<18} {nodes:>2} {readers:>3} {cell('files_per_s', '.0f')} {cell('mean_s', '.2f', 1e3)} "
                     f"{cell('p50_s', '.2f', 1e3)} {cell('p90_s', '.2f', 1e3)} {cell('p99_s', '.2f', 1e3, 13)} "
                     f"{cell('max_s', '.1f', 1e3, 13)} {cell('cv', '.2f', width=9)} "
                     f"{cell('mean_over_k1', '.2f', width=9)} {cell('p99_over_k1', '.2f', width=9)} "
                     f"{cell('cv', '.2f', width=9, source=lognormal)} {cell('p99_over_p50', '.2f')} "
                     f"{cell('ratio', '.2f', width=10, source=lognormal)}")
    return "\n".join(lines)
