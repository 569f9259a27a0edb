"""The client factor's family, lognormal or Pareto (issue 46): experiments/scale_tails.py's logic.

The scale model draws one factor per node (`shared.client_spread`, mean 1) that multiplies each file's
RPC time; synchronous SGD waits for the slowest of the M nodes at every iteration, so GS/LS grows with M
through the largest of M draws, whose quantiles are exact (hpcshuffle/scale/order_stats.py). Two parts:

- analysis: the slowest-of-M factor (median, p10–p90) and ResNet-50's GS/LS on `abci` (the order-statistics
  breakdown with `client_spread` swapped) for a lognormal and for a Pareto of the same mean, the Pareto
  matched either on the cv (where finite) or on the median slowest of `MATCH_NODES` nodes (the fit's
  slowest of 512 workers: what the fit pins down, so the family decides only how it extrapolates in M);
- measurement: per-file read times of K reader processes reading distinct files at once from shared
  storage (the GlusterFS volume of scripts/shared_fs.sh, the pool and reads of
  hpcshuffle/storage/read_latency.py), and the families compared on them: on every file's time, on the
  tail above a quantile (the conditional densities), and on the per-reader factors (a reader's mean over
  the mean of the K readers), by log-likelihood, Vuong's normalised likelihood ratio and the KS distance.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import optimize

from hpcshuffle.analysis.families import client_factors, compare_families
from hpcshuffle.scale.order_stats import breakdown, extreme_quantile
from hpcshuffle.scale.platform import Distribution, Platform
from hpcshuffle.scale.platform_yaml import load_platform
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.scale.seeds import SPREAD_PROBABILITIES, Spread
from hpcshuffle.storage.read_latency import assignment, pool_path, read_whole
from hpcshuffle.studies.order_fit import with_free

NODES = (4, 16, 32, 128, 256, 512)  # the analysis's M
MATCH_NODES = 128  # the Pareto matched on the median slowest of this many nodes: the fit's 512 workers (Nguyen Sec. V-F) are 128 nodes of 4 ranks, and the factor is per node
MODEL = "resnet50"
FAMILIES = ("lognormal", "pareto")
FITTED_KNOBS = ("shared.file_latency", "shared.client_spread.cv", "loader.cpu_per_file")


# ---------------------------------------------------------------- analysis


def pareto_same_cv(mean: float, cv: float) -> Distribution:
    """The Pareto of `mean` and coefficient of variation `cv` (> 0): shape α = 1 + √(1 + 1/cv²), from
    cv² = 1/(α(α−2)); its variance is finite (α > 2) for every cv."""
    if not (mean > 0 and cv > 0 and math.isfinite(cv)):
        raise ValueError(f"a Pareto matched on the cv needs mean > 0 and a finite cv > 0, got mean {mean}, cv {cv}")
    return Distribution("pareto", mean, shape=1.0 + math.sqrt(1.0 + 1.0 / (cv * cv)))


def pareto_same_slowest(target: Distribution, nodes: int = MATCH_NODES) -> Distribution:
    """The Pareto of `target`'s mean whose median largest of `nodes` draws equals `target`'s.

    At a fixed mean that median is not monotone in the shape α: it tends to the mean as α → ∞ and to 0
    as α → 1 (the scale x_m = mean·(α−1)/α vanishes), with one peak between. Two shapes may match; this is
    the lighter one (α above the peak), whose bulk is still near the mean. ValueError where none does."""
    if nodes < 2:
        raise ValueError(f"matching the slowest of `nodes` needs nodes >= 2, got {nodes}")
    goal = float(extreme_quantile(target, nodes, 0.5))
    if goal <= target.mean:
        raise ValueError(f"the median slowest of {nodes} draws of {target} is not above its mean: nothing to match")

    def excess(log_excess_shape: float) -> float:
        spread = Distribution("pareto", target.mean, shape=1.0 + math.exp(log_excess_shape))
        return math.log(float(extreme_quantile(spread, nodes, 0.5)) / goal)
    peak = optimize.minimize_scalar(lambda v: -excess(v), bounds=(math.log(1e-6), math.log(1e3)), method="bounded",
                                    options={"xatol": 1e-10}).x
    if excess(peak) < 0:
        raise ValueError(f"no Pareto of mean {target.mean} has a median slowest of {nodes} as large as {goal:.4g}")
    shape = 1.0 + math.exp(optimize.brentq(excess, peak, math.log(1e3), xtol=1e-12))
    return Distribution("pareto", target.mean, shape=shape)


def slowest(spread: Distribution, nodes: int) -> Spread:
    """The largest of `nodes` i.i.d. factors drawn from `spread`: its median and p10–p90 (exact)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    return Spread(*(float(v) for v in extreme_quantile(spread, nodes, SPREAD_PROBABILITIES)))


def gs_over_ls(platform: Platform, spread: Distribution, nodes: int, model: str = MODEL) -> Spread:
    """GS's epoch over LS's for `model` on `nodes` nodes (all their ranks) of `platform` with the client
    factor drawn from `spread`: median and p10–p90 over seeds (the order-statistics breakdown; GS's
    epoch is monotone in the slowest factor, so its quantiles are the slowest factor's)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    changed = replace(platform, shared=replace(platform.shared, client_spread=spread))
    workers = nodes * platform.ranks_per_node
    gs = breakdown(changed, Scenario(workers, "global", None, model=model)).epoch_s
    local = breakdown(changed, Scenario(workers, "local", None, model=model)).epoch_s.median
    return Spread(gs.median / local, gs.p10 / local, gs.p90 / local)


def spreads_to_compare(cv: float, mean: float = 1.0, nodes: int = MATCH_NODES) -> dict[str, Distribution]:
    """The three client factors compared: the lognormal of `mean` and `cv`, the Pareto of the same mean and
    cv, and the Pareto of the same mean and the same median slowest of `nodes`."""
    lognormal = Distribution("lognormal", mean, cv=cv)
    return {"lognormal": lognormal, "pareto, same cv": pareto_same_cv(mean, cv),
            f"pareto, same slowest-of-{nodes}": pareto_same_slowest(lognormal, nodes)}


def analysis_rows(platform: Platform, spreads: dict[str, Distribution], nodes=NODES, model: str = MODEL) -> list[dict]:
    """Per spread and M of `nodes`: the slowest-of-M factor and GS/LS (median, p10, p90) as a dict row."""
    rows = []
    for name, spread in spreads.items():
        for count in nodes:
            rows.append({"spread": name, "dist": spread.dist, "cv": spread.cv if spread.dist == "lognormal"
                         else math.sqrt(spread.scv()), "shape": spread.shape or None, "nodes": count,
                         "slowest": slowest(spread, count).as_dict(),
                         "gs_over_ls": gs_over_ls(platform, spread, count, model).as_dict()})
    return rows


def analysis_table(rows: list[dict], platform_name: str, model: str = MODEL) -> str:
    """The analysis rows as text: one line per spread and M."""
    lines = [f"slowest-of-M client factor and {model} GS/LS on {platform_name} (M nodes x ranks_per_node workers; "
             "order-statistics path), median (p10-p90) over seeds",
             f"{'client factor':<46} {'M':>4} {'slowest factor':>24} {'GS/LS':>22}"]
    for row in rows:
        s, r = row["slowest"], row["gs_over_ls"]
        params = f"cv {row['cv']:.3g}" + (f", a {row['shape']:.3g}" if row["dist"] == "pareto" else "")
        label = f"{row['spread']} ({params})"
        lines.append(f"{label:<46} {row['nodes']:>4} {s['median']:>7.2f} ({s['p10']:.2f}-{s['p90']:.2f}){'':>3}"
                     f"{r['median']:>6.2f} ({r['p10']:.2f}-{r['p90']:.2f})")
    return "\n".join(lines)


def fitted_values(text: str) -> dict[str, float]:
    """The fitted knobs from fit.txt's text (experiments/scale_fit.py): the `fitted` column of its knob table;
    ValueError naming a knob that is not there."""
    values = {}
    for knob in FITTED_KNOBS:
        found = re.search(rf"^{re.escape(knob)}\s+(\S+)\s", text, flags=re.M)
        if not found:
            raise ValueError(f"fit.txt has no fitted value for {knob}")
        values[knob] = float(found.group(1))
    return values


# ---------------------------------------------------------------- measurement


def _reader(root: str, indices: list[int], start_at: float, results) -> None:
    """One reader process: wait for `start_at`, read `indices` of the pool one after the other, put
    (its slot, every file's seconds) on `results`."""
    slot, files = indices
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    times = []
    for index in files:
        started = time.perf_counter()
        read_whole(pool_path(Path(root), index))
        times.append(time.perf_counter() - started)
    results.put((slot, times))


def measure_point(root: Path, pool: int, readers: int, per_reader: int, seed: int) -> list[list[float]]:
    """`readers` processes (forked), each reading its own `per_reader` distinct files of the pool at `root`
    (read_latency's assignment for one node), all starting at one instant: each reader's per-file seconds."""
    if readers < 2 or per_reader < 1:
        raise ValueError(f"need readers >= 2 and per_reader >= 1, got {readers}, {per_reader}")
    plan = assignment(pool, 1, 0, readers, per_reader, seed)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    start_at = time.time() + 0.5 + 0.02 * readers
    processes = [context.Process(target=_reader, args=(str(root), (slot, files), start_at, results))
                 for slot, files in enumerate(plan)]
    for process in processes:
        process.start()
    gathered = dict(results.get(timeout=600) for _ in processes)
    for process in processes:
        process.join()
    return [gathered[slot] for slot in range(readers)]


def noise_cv(per_reader: list[list[float]]) -> float:
    """The cv the reader factors would show from sampling alone, had every reader the same distribution:
    the mean over readers of (a reader's per-file cv) / √(its files)."""
    return float(np.mean([np.std(times) / np.mean(times) / math.sqrt(len(times)) for times in per_reader]))


def summarize_measurement(points: list[dict], tail_quantile: float = 0.9) -> dict:
    """From measured points ({"readers", "repeat", "times": per-reader lists}): per readers count, the
    per-file comparison (all files of its repeats pooled, whole and tail), each repeat's factors' cv and
    max, and the comparison on the factors pooled over repeats; and both comparisons over every point (each
    point's file times over their mean, so points of different speed pool)."""
    if not points:
        raise ValueError("no measured points")
    summary: dict = {"by_readers": {}}
    all_times, all_factors = [], []
    for readers in sorted({point["readers"] for point in points}):
        mine = [point for point in points if point["readers"] == readers]
        times = np.concatenate([np.concatenate(point["times"]) for point in mine])
        factors = [client_factors(point["times"]) for point in mine]
        pooled = np.concatenate(factors)
        all_times += [np.concatenate(point["times"]) / np.concatenate(point["times"]).mean() for point in mine]
        all_factors.append(pooled)
        summary["by_readers"][readers] = {
            "repeats": len(mine), "files": int(times.size),
            "file_mean_ms": 1e3 * float(times.mean()), "file_p50_ms": 1e3 * float(np.median(times)),
            "file_p99_ms": 1e3 * float(np.quantile(times, 0.99)),
            "files_whole": compare_families(times).as_dict(),
            "files_tail": compare_families(times, tail_quantile).as_dict(),
            "factor_cv": [float(f.std() / f.mean()) for f in factors],
            "factor_max": [float(f.max()) for f in factors],
            "factor_noise_cv": [noise_cv(point["times"]) for point in mine],
            "factors": compare_families(pooled).as_dict()}
    summary["files_whole"] = compare_families(np.concatenate(all_times)).as_dict()
    summary["files_tail"] = compare_families(np.concatenate(all_times), tail_quantile).as_dict()
    summary["factors"] = compare_families(np.concatenate(all_factors)).as_dict()
    return summary


# ---------------------------------------------------------------- the report


def crossing_nodes(lognormal: Distribution, pareto: Distribution, most: int = 10 ** 7) -> int | None:
    """The smallest M ≥ 2 (a power of 2) at which `pareto`'s median slowest of M passes `lognormal`'s, or
    None up to `most`."""
    count = 2
    while count <= most:
        if slowest(pareto, count).median > slowest(lognormal, count).median:
            return count
        count *= 2
    return None


def _comparison_line(label: str, found: dict) -> str:
    """One comparison as a table line."""
    return (f"{label:<40} {found['n']:>6} {found['loglik_lognormal']:>12.1f} {found['loglik_pareto']:>12.1f} "
            f"{found['vuong_z']:>8.2f} {found['vuong_p']:>8.2g} {found['ks_lognormal']:>7.3f} {found['ks_pareto']:>7.3f}"
            f"  {found['better']}")


COMPARISON_HEAD = (f"{'samples':<40} {'n':>6} {'loglik LN':>12} {'loglik Par':>12} {'Vuong z':>8} {'p':>8} "
                   f"{'KS LN':>7} {'KS Par':>7}  higher likelihood")


def cluster_node_factors(latency: dict) -> dict[str, list[np.ndarray]]:
    """Per target of results/reference/storage/latency.json with several nodes: each point's per-node
    factors (a node's mean file time over the nodes' mean)."""
    found: dict[str, list[np.ndarray]] = {}
    for row in latency.get("rows", []):
        means = row.get("node_mean_s") or []
        if row.get("nodes", 1) >= 2 and len(means) >= 2:
            found.setdefault(row["target"], []).append(np.asarray(means) / np.mean(means))
    return found


def measurement_lines(measured: dict, summary: dict) -> list[str]:
    """The measurement's section of tails.txt."""
    lines = [f"measured: {measured['target']}; {measured['command']} ({measured['when']}, {measured['cpus']} CPUs)",
             f"  K reader processes at once, each reading {measured['files_per_reader']} distinct "
             f"{measured['file_bytes'] // 1024} KB files one after the other (open, read, drop pages, close); "
             f"{measured['repeats']} repeats; pool {measured['pool_files']} files read once untimed before",
             "", f"{'K':>3} {'files':>6} {'mean ms':>8} {'p50 ms':>7} {'p99 ms':>7}   {'reader-factor cv per repeat':>28}"
                 f" {'(sampling alone)':>24}   {'slowest reader factor per repeat':>34}"]
    for readers, row in summary["by_readers"].items():
        cvs = ", ".join(f"{v:.3f}" for v in row["factor_cv"])
        tops = ", ".join(f"{v:.3f}" for v in row["factor_max"])
        noise = ", ".join(f"{v:.3f}" for v in row["factor_noise_cv"])
        lines.append(f"{readers:>3} {row['files']:>6} {row['file_mean_ms']:>8.2f} {row['file_p50_ms']:>7.2f} "
                     f"{row['file_p99_ms']:>7.2f}   {cvs:>28} {noise:>24}   {tops:>34}")
    lines += ["", "lognormal (LN) against Pareto (Par), each fitted by maximum likelihood; Vuong z > 0 favours LN; "
              "KS: the largest CDF distance of each fit", COMPARISON_HEAD]
    for readers, row in summary["by_readers"].items():
        lines.append(_comparison_line(f"per-file times, K={readers}", row["files_whole"]))
        lines.append(_comparison_line(f"per-file times above p90, K={readers}", row["files_tail"]))
        lines.append(_comparison_line(f"reader factors, K={readers} (repeats pooled)", row["factors"]))
    lines.append(_comparison_line("per-file times / point mean, all", summary["files_whole"]))
    lines.append(_comparison_line("  the same, above p90", summary["files_tail"]))
    lines.append(_comparison_line("reader factors, all points", summary["factors"]))
    return lines


def write_report(out: Path, latency_paths: list[Path], command: str, platform_name: str = "abci") -> str:
    """Write <out>/tails.txt (and the analysis rows and the measurement's statistics into
    <out>/tails_analysis.json): the analysis on `platform_name` with fit.txt's values, the measurement of
    <out>/tails_measured.json where it is there, the namespace cluster's per-node factors from each of
    `latency_paths` (storage_latency.py's results files) that is there, and the conclusion; returns the text."""
    fit_text = (out / "fit.txt").read_text()
    values = fitted_values(fit_text)
    platform = with_free(load_platform(platform_name), values)
    spreads = spreads_to_compare(values["shared.client_spread.cv"])
    rows = analysis_rows(platform, spreads)
    names = list(spreads)
    lognormal, same_cv = spreads[names[0]], spreads[names[1]]
    cross = crossing_nodes(lognormal, same_cv)
    growth = {name: slowest(spread, NODES[-1]).median / slowest(spread, NODES[0]).median for name, spread in spreads.items()}
    lines = [command, "",
             f"Issue 46: the client factor's family. fit.txt's fitted values ({', '.join(f'{k} {v:g}' for k, v in values.items())}); "
             "every factor has mean 1.", "", analysis_table(rows, platform_name), "",
             "growth of the median slowest factor from M=4 to M=512: "
             + ", ".join(f"{name} x{value:.2f}" for name, value in growth.items()),
             f"the same-cv Pareto's median slowest passes the lognormal's at M = {cross} nodes (first power of 2)"
             if cross else "the same-cv Pareto's median slowest stays below the lognormal's up to 10^7 nodes"]
    saved: dict = {"fitted": values, "analysis": rows, "crossing_nodes": cross}
    measured_path = out / "tails_measured.json"
    summary = None
    if measured_path.exists():
        measured = json.loads(measured_path.read_text())
        summary = summarize_measurement(measured["points"])
        saved["measured"] = summary
        lines += ["", *measurement_lines(measured, summary)]
    else:
        lines += ["", f"not measured yet: {measured_path.name} is not there (experiments/scale_tails.py measure)"]
    clusters: dict[str, list[np.ndarray]] = {}
    for path in latency_paths:
        if path.exists():
            clusters.update(cluster_node_factors(json.loads(path.read_text())))
    if clusters:
        lines += ["", "per-node factors of the namespace cluster's points in "
                  + ", ".join(str(path) for path in latency_paths if path.exists())
                  + " (2 or 3 nodes, k reader threads each; storage_latency.py cluster; latN ms: cluster.sh's "
                  "--storage-latency-ms, storage link 1gbit): a node's mean file time over the nodes' mean",
                  "  " + COMPARISON_HEAD]
        saved["cluster_node_factors"] = {}
        for target, factors in clusters.items():
            pooled = np.concatenate(factors)
            cvs = [float(f.std() / f.mean()) for f in factors]
            found = compare_families(pooled).as_dict()
            saved["cluster_node_factors"][target] = {"points": len(factors), "cv_range": [min(cvs), max(cvs)],
                                                     "largest": float(pooled.max()), "comparison": found}
            lines.append(f"  {target}: {len(factors)} points, {pooled.size} node factors, cv per point "
                         f"{min(cvs):.3f}-{max(cvs):.3f}, largest factor {pooled.max():.3f}")
            lines.append("  " + _comparison_line(f"node factors, {target}", found))
    lines += ["", "conclusion", *conclusion(rows, summary, clusters, values["shared.client_spread.cv"])]
    text = "\n".join(lines) + "\n"
    (out / "tails.txt").write_text(text)
    (out / "tails_analysis.json").write_text(json.dumps(saved, indent=1, default=float) + "\n")
    return text


def conclusion(rows: list[dict], summary: dict | None, clusters: dict, cv: float) -> list[str]:
    """The conclusion's lines, from the numbers (filled in by CONCLUSION's fixed reading)."""
    def row(spread: str, nodes: int) -> dict:
        return next(r for r in rows if r["spread"] == spread and r["nodes"] == nodes)
    names = list(dict.fromkeys(r["spread"] for r in rows))
    lines = []
    for nodes, where in ((32, "128 workers, Nguyen Fig. 9's 'almost 5x'"), (128, "512 workers, the fit's Sec. V-F")):
        at = {name: row(name, nodes)["gs_over_ls"] for name in names}
        lines.append(f"ResNet-50 GS/LS at {nodes} nodes ({where}): "
                     + "; ".join(f"{name} {v['median']:.2f} ({v['p10']:.2f}-{v['p90']:.2f})" for name, v in at.items()))
    if summary is not None:
        whole, tail, factors = summary["files_whole"], summary["files_tail"], summary["factors"]
        lines.append(f"per-file times (n={whole['n']}): {whole['better']} has the higher likelihood (Vuong z "
                     f"{whole['vuong_z']:+.1f}, p {whole['vuong_p']:.2g}; KS LN {whole['ks_lognormal']:.3f}, Par "
                     f"{whole['ks_pareto']:.3f}); above p90 (n={tail['n']}): {tail['better']} (z {tail['vuong_z']:+.1f}, "
                     f"p {tail['vuong_p']:.2g}; KS LN {tail['ks_lognormal']:.3f}, Par {tail['ks_pareto']:.3f}, "
                     f"Pareto alpha {tail['pareto']['alpha']:.2f})")
        cvs = [v for r in summary["by_readers"].values() for v in r["factor_cv"]]
        lines.append(f"reader factors (n={factors['n']}, pooled over K and repeats): {factors['better']} (z "
                     f"{factors['vuong_z']:+.1f}, p {factors['vuong_p']:.2g}); their cv per point {min(cvs):.3f}-"
                     f"{max(cvs):.3f}, against the fitted cv {cv:.3g}")
    lines += CONCLUSION
    return lines


CONCLUSION: list[str] = """\
Reading (written for the tails_measured.json of 2026-11-27; rerunning `measure` changes the numbers above, not
this text):
- Per-file times: a lognormal fits the whole distribution at every K (KS 0.04-0.08) and a Pareto cannot
  (KS ~0.5): the times have a body around their median and no hard floor. In the top 10 % the two are not
  told apart (Vuong |z| <= 1.2, p >= 0.25 at each K, n = 300-1,200 per K, 2,100 pooled), and the Pareto fitted
  there has alpha ~7: a light tail. Supported: lognormal for the body; for the tail, neither over the other,
  but nothing as heavy as the alpha ~1.9-2.3 a Pareto client factor of the fit's size needs.
- Per-client factors: on one machine the K readers' means differ by a cv of 0.5-3.3 %, the size sampling alone
  gives (1.0-1.7 %); the namespace cluster's nodes differ by <= 8 % (n = 127 node factors at 0, 2 and 5 ms
  added per read). There is no
  client factor here to speak of, so the family of a factor with cv 1.24 is NOT tested by these measurements:
  the lognormal's higher likelihood on the factors (n = 84, z +7.4) says only that they scatter around 1 with
  no floor, not how the slowest of 128 behaves. Evidence on the factor's family at ABCI's spread: none.
- What the family does at the paper's scale: the fit pins the slowest of 128 nodes (512 workers). A Pareto
  matched there (alpha 1.9, infinite variance) gives the same GS/LS at 512 workers (5.92 against 5.93, p90
  14.1 against 9.7) but 3.43 at 128 workers against the lognormal's 4.01 (paper: "almost 5x") and 9.96 at
  2,048 workers against 7.79. A Pareto of the same mean and cv gives lower medians everywhere below ~2,000
  nodes (4.71 at 512 workers) with wider p90s. So the family moves GS/LS by 10-30 % away from the fitted size,
  and the lognormal's slower growth in M is the one closer to the paper's own 128-worker number, a weak check
  (one number, both under it, both p90s above it).
- abci.yaml: keep `client_spread: lognormal`. The measurements support it for what they can see (the body of
  the per-file times; no heavy per-file tail); they cannot see a per-client factor of cv ~1, which on ABCI is a
  fitted, not a measured, quantity. Testing the tail needs per-rank read times from many nodes of a production
  file system (the paper's run logs per rank), not one machine. Not edited here (it would re-simulate every
  cached result).""".splitlines()
