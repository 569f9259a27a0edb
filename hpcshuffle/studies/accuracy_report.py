"""The accuracy study's results (experiments/accuracy_study.py): per-epoch bands over seeds, each run's
row, the study's JSON (and a variant filed under a main study's), its figures and the predicted-q lines."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from hpcshuffle.analysis.intervals import (
    REACH_LEVEL,
    REACH_RULE,
    interval95,
    paired_gap,
    reaches_global,
)
from hpcshuffle.analysis.plots import plot_curves, plot_scatter
from hpcshuffle.analysis.study import points, quality_vs_gap, summary
from hpcshuffle.plan import with_role
from hpcshuffle.studies.accuracy_runs import (
    cell_dir,
    label,
    runs_cell,
    runs_dir,
    strategy_of,
)
from hpcshuffle.studies.runs import records
from hpcshuffle.training.metrics import validation_score

SKEW_TOLERANCE = 0.01  # tune-q --predict's default: label skew a q may exceed global shuffling's by


def epoch_bands(cell: Path, strategy: str, seeds: int):
    """Per epoch the mean validation top-1 over seeds and its 95 % interval."""
    runs = [records(cell / f"seed{seed}") for seed in range(seeds)]
    epochs = min(len(run) for run in runs)
    means, bands = {}, {}
    for epoch in range(epochs):
        mean, low, high = interval95([validation_score(run[epoch]) for run in runs], f"{strategy} epoch {epoch}")
        means[epoch], bands[epoch] = mean, (low, high)
    return means, bands


def runs_of(rows: list[dict], result: dict) -> list[dict]:
    """Per run: its point, seed, final top-1, gap to global's mean, mixing and label skew (final, early)."""
    reference = {(r["partition"], r["workers"]): r["top1_mean"] for r in result["rows"]
                 if r["strategy"] == with_role("reference").name}
    return [{"partition": row.get("partition") or "random", "workers": row["workers"], "strategy": row["shuffle"],
             "q": row["q"], "seed": row["seed"], "top1": round(row["final_score"], 3),
             "gap": round(row["final_score"] - base, 3) if (base := reference.get(
                 (row.get("partition") or "random", row["workers"]))) is not None else None,
             "mixing": row["mixing"], "label_skew": row["label_skew"], "label_skew_early": row["label_skew_early"]}
            for row in sorted(rows, key=lambda row: (row.get("partition") or "random", row["workers"], row["shuffle"],
                                                     row["q"], row["seed"])) if row["complete"]]


def rows_of_runs(runs: list[dict]) -> list[dict]:
    """A study JSON's stored runs (`runs_of`) as the summary rows they were made from, final top-1 as
    stored (3 decimals): what re-scoring a study needs, with no run directory. Each row's `run` names
    the run as the correlations count it: its directory under the study, where a strategy without a
    partition has one for every partition's cell (`runs_cell`, its partition left out)."""
    def name(run: dict) -> str:
        return str(cell_dir(Path(), *runs_cell("", run["partition"], run["workers"], strategy_of(run)))
                   / f"seed{run['seed']}")
    return [{"complete": True, "final_score": run["top1"], "partition": run["partition"], "workers": run["workers"],
             "shuffle": run["strategy"], "q": run["q"], "seed": run["seed"], "mixing": run["mixing"],
             "label_skew": run["label_skew"], "label_skew_early": run["label_skew_early"], "run": name(run)}
            for run in runs]


def rescored(study: dict, preregistered: dict | None) -> dict:
    """`study` (a study's JSON, or one of its variants) summarised again from its stored runs under
    today's rule, with its cells' plan predictions and plan measures kept and, given its pre-registration,
    that held against it again; no run is trained or read."""
    result = summary(rows_of_runs(study["runs"]))
    before = {(c["partition"], c["workers"]): c for c in study["cells"]}
    for cell in result["cells"]:
        old = before[(cell["partition"], cell["workers"])]
        cell.update({key: old[key] for key in ("predicted_q", "predicted_skew", "plan_measures") if key in old})
    result.update(setup=study["setup"], runs=study["runs"])
    if preregistered is not None:
        result["preregistered"] = preregistration_check(result, preregistered)
    first = study["runs"][0]
    stamp(result, first["dataset"], first["norm"])
    return result


def norm_of(rows: list[dict]) -> str:
    """The one model.norm of a study's runs (a study compares shuffling, so it holds one)."""
    norms = {row["norm"] for row in rows}
    if len(norms) != 1:
        raise RuntimeError(f"the study's runs mix model.norm {sorted(norms)}; give each its own --out")
    return norms.pop()


def stamp(result: dict, dataset: str, norm: str) -> str:
    """Name the dataset and norm on every point, cell and run of `result`; returns `<dataset>/<norm>`."""
    for entry in (*result["rows"], *result["cells"], *result["runs"]):
        entry.update(dataset=dataset, norm=norm)
    return f"{dataset}/{norm}"


def write_study(path: Path, result: dict) -> None:
    """Write a study's JSON, keeping the variants already filed in it (`--into`)."""
    if path.exists() and "variants" in (before := json.loads(path.read_text())):
        result = {**result, "variants": before["variants"]}
    path.write_text(json.dumps(result, indent=1) + "\n")


def file_variant(path: Path, variant: str, result: dict) -> None:
    """File `result` under the main study's `variants` at `path`, as `variant`."""
    if not path.exists():
        sys.exit(f"--into {path}: no such study JSON; run the main study first (experiments/reference.sh does)")
    main_study = json.loads(path.read_text())
    main_study.setdefault("variants", {})[variant] = {key: result[key] for key in (
        "setup", "rows", "cells", "gaps", "runs", "quality_vs_gap", "preregistered") if key in result}
    path.write_text(json.dumps(main_study, indent=1) + "\n")
    print(f"filed as {variant} under {path}'s variants")


def figures_of(result: dict, rows: list[dict], out: Path, partitions: list[str], workers_each: list[int],
               strategies: list[str], seeds: int, figures: Path) -> None:
    """The study's figures under `figures`: per (partition, M) the curves per epoch with their bands, per
    partition accuracy against workers and what q wins back, and each measure of shuffling against the gap;
    only for the (partition, M) the result holds (`partitions[0]` is where runs without a partition lie)."""
    kind = "virtual workers"
    filed = {(cell["partition"], cell["workers"]) for cell in result["cells"]}
    for partition in [p for p in partitions if any(key[0] == p for key in filed)]:
        for workers in [m for m in workers_each if (partition, m) in filed]:
            curves, bands = {}, {}
            for strategy in strategies:
                cell = runs_dir(out, partitions[0], partition, workers, strategy)
                curves[label(strategy)], bands[label(strategy)] = epoch_bands(cell, strategy, seeds)
            plot_curves(curves, "validation top-1 (%)", figures / f"accuracy_{partition}_M{workers}.png",
                        title=f"{partition}, M = {workers} {kind}: mean, 95 % band, {seeds} seeds",
                        bands=bands)
        scaling, scaling_bands = {}, {}
        for strategy in strategies:
            mine = [r for r in result["rows"] if r["partition"] == partition and strategy_of(r) == strategy]
            scaling[label(strategy)] = {r["workers"]: r["top1_mean"] for r in mine}
            scaling_bands[label(strategy)] = {r["workers"]: tuple(r["ci95"]) for r in mine}
        plot_curves(scaling, "final validation top-1 (%)", figures / f"accuracy_vs_workers_{partition}.png",
                    xlabel=f"workers M ({kind})", log_x=True, bands=scaling_bands,
                    title=f"{partition} partition: final accuracy against workers (95 % intervals)")
        recovery, recovery_bands = {}, {}
        for workers in [m for m in workers_each if (partition, m) in filed]:
            mine = [r for r in result["rows"] if (r["partition"], r["workers"]) == (partition, workers)]
            axis = [r for r in mine if r["strategy"] != with_role("reference").name]
            recovery[f"M={workers}"] = {r["q"]: r["top1_mean"] for r in axis}
            recovery_bands[f"M={workers}"] = {r["q"]: tuple(r["ci95"]) for r in axis}
            reference = next((r for r in mine if r["strategy"] == with_role("reference").name), None)
            if reference and axis:
                span = [min(r["q"] for r in axis), max(r["q"] for r in axis)]
                recovery[f"global, M={workers}"] = {q: reference["top1_mean"] for q in span}
                recovery_bands[f"global, M={workers}"] = {q: tuple(reference["ci95"]) for q in span}
        plot_curves(recovery, "final validation top-1 (%)", figures / f"q_recovery_{partition}.png",
                    xlabel="exchange fraction q (0: local shuffling)",
                    title=f"{partition} partition: what q wins back (95 % intervals)", bands=recovery_bands)
    found = points(rows)
    for measure, name, xlabel in (("label_skew", "quality_vs_gap.png", "final label skew (same-class excess, 0 = global)"),
                                  ("mixing", "mixing_vs_gap.png", "final shuffle quality (mixing, 1 = global)")):
        found_pairs = quality_vs_gap(rows, found, measure)
        if not found_pairs:
            continue
        corr = result["quality_vs_gap"] if measure == "mixing" else result["quality_vs_gap"][measure]
        groups = {p: [(x, y) for x, y, part, _, _ in found_pairs if part == p] for p in partitions}
        plot_scatter(groups, xlabel, "top-1 minus global's mean (points)", figures / name,
                     title=f"{measure} vs gap to global: Pearson r = {corr['pearson_r']}, Spearman ρ = "
                           f"{corr['spearman_rho']}, {corr['runs']} runs")


def prediction_lines(result: dict) -> str:
    """Per cell, q from the plan alone (tune-q --predict) beside q from training."""
    lines = [f"q without training (tune-q --predict, label skew at the last epoch within {SKEW_TOLERANCE} of "
             f"global's) against the trained answer (the smallest q that reaches global: {REACH_RULE})"]
    for cell in result["cells"]:
        predicted, trained = (("none" if q is None else f"{q:g}")
                              for q in (cell["predicted_q"], cell["smallest_q_reaching_global"]))
        lines.append(f"{cell['partition']} M={cell['workers']}: predicted q={predicted}, trained q={trained}")
    return "\n".join(lines)


def preregistration_check(result: dict, preregistered: dict) -> dict:
    """The pre-registered predictions (experiments/accuracy_study.py --preregister) held against the trained
    cells: per cell the predicted and the trained q (the paired rule), a hit where they agree or the
    predicted q reaches global shuffling, and per pair of strategies whose planned skews differ by the
    tolerance or more whether training ranks them as predicted (a pair ranked the other way counts as a
    miss beyond the noise only where their own paired gap's interval excludes 0); the registered cells
    the result does not hold (no runs yet, or collected before every strategy had its seeds) apart, as
    `not_trained`. The constants "always LS / 0.1 / 0.3" are scored on the same cells by the same rule
    (`baselines`) and by the exact one, the q training found and no other (`baselines_exact`, beside the
    predictor's `q_same`)."""
    scores = {(r["partition"], r["workers"], strategy_of(r)): dict(zip(r["seeds"], r["top1"])) for r in result["rows"]}
    trained_q = {(c["partition"], c["workers"]): c["smallest_q_reaching_global"] for c in result["cells"]}
    cells, not_trained = [], []
    baselines, exact = dict.fromkeys(CONSTANT_QS, 0), dict.fromkeys(CONSTANT_QS, 0)
    for cell in preregistered["cells"]:
        key = (cell["partition"], cell["workers"])
        if key not in trained_q:
            not_trained.append({"partition": key[0], "workers": key[1]})
            continue
        mine = {strategy: scores[(*key, strategy)] for strategy in cell["skew"] if (*key, strategy) in scores}

        def hit(q: float | None) -> bool:  # the same q training found, or one that reaches global shuffling too
            strategy = None if q is None else "local" if q == 0 else f"partial-{q:g}"
            return q == trained_q[key] or (strategy in mine and reaches_global(
                paired_gap(mine[strategy], mine["global"], strategy, REACH_LEVEL)[1:3]))
        predicted = cell["predicted_q"]
        for q in CONSTANT_QS:
            baselines[q] += hit(q)
            exact[q] += q == trained_q[key]
        pairs = [(a, b) for a in mine for b in mine if cell["skew"][b] - cell["skew"][a] >= SKEW_TOLERANCE]
        against = [(a, b) for a, b in pairs if statistics.fmean(mine[a].values()) < statistics.fmean(mine[b].values())]
        beyond = [(a, b) for a, b in against if paired_gap(mine[a], mine[b], f"{a} - {b}")[2] < 0]
        cells.append({"partition": key[0], "workers": key[1], "predicted_q": predicted, "trained_q": trained_q[key],
                      "q_hit": hit(predicted), "predicted_order": cell["predicted_order"],
                      "trained_order": sorted(mine, key=lambda s: -statistics.fmean(mine[s].values())),
                      "pairs_claimed": len(pairs), "pairs_against": len(against), "pairs_against_beyond_noise": len(beyond)})
    return {"cells": cells, "not_trained": not_trained, "q_hits": sum(c["q_hit"] for c in cells),
            "q_same": sum(c["predicted_q"] == c["trained_q"] for c in cells),
            "pairs_claimed": sum(c["pairs_claimed"] for c in cells),
            "pairs_against": sum(c["pairs_against"] for c in cells),
            "pairs_against_beyond_noise": sum(c["pairs_against_beyond_noise"] for c in cells),
            "baselines": {constant_name(q): hits for q, hits in baselines.items()},
            "baselines_exact": {constant_name(q): hits for q, hits in exact.items()}}


CONSTANT_QS = (0.0, 0.1, 0.3)  # the simplest predictors, scored by the same rule: always LS, always 0.1, always 0.3


def constant_name(q: float) -> str:
    """How the study names the constant prediction q: "always LS", "always 0.1"."""
    return "always LS" if q == 0 else f"always {q:g}"


def preregistration_table(check: dict) -> str:
    """`preregistration_check` as the study prints it."""
    def q(value: float | None) -> str:
        return "none" if value is None else f"{value:g}"

    lines = ["pre-registered (committed before training) against trained: q by the paired rule (hit: the same q, or "
             "the predicted q reaches global); order: pairs of strategies whose planned skews differ by "
             f"{SKEW_TOLERANCE} or more, ranked the other way by training (beyond the noise: their paired gap's "
             "interval excludes 0)",
             f"{'partition':<22} {'M':>3} {'q pred':>6} {'q trained':>9} {'hit':>4}  {'pairs against/claimed':>21}  "
             "trained order (best first)"]
    for c in check["cells"]:
        against = f"{c['pairs_against']}/{c['pairs_claimed']} ({c['pairs_against_beyond_noise']} beyond)"
        lines.append(f"{c['partition']:<22} {c['workers']:>3} {q(c['predicted_q']):>6} {q(c['trained_q']):>9} "
                     f"{'yes' if c['q_hit'] else 'no':>4}  {against:>21}  {' > '.join(map(label, c['trained_order']))}")
    lines.append(f"q: {check['q_hits']} of {len(check['cells'])} cells hit ({check['q_same']} the same q); order: {check['pairs_against']} of "
                 f"{check['pairs_claimed']} claimed pairs ranked the other way, {check['pairs_against_beyond_noise']} "
                 "of them beyond the noise")
    lines.append("the same rule for constant predictions: " + ", ".join(
        f"{name} {hits} of {len(check['cells'])} ({check['baselines_exact'][name]} the same q)"
        for name, hits in check["baselines"].items()))
    return "\n".join(lines)
