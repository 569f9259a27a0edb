"""Probe → predict on the namespace cluster (experiments/scale_probe_predict.py): measure one node,
predict the epochs of more nodes with an interval, then measure those epochs several times.

- **Probe** (`probe_once`, repeated): everything on ONE node. Its storage and compute rates through
  the loader's code (experiments/cluster_probe.py node), the shared storage's rate with 1…k reader
  threads at once, the MPI link between two ranks of that node forced through MPICH's network module
  (`MPIR_CVAR_NOLOCAL=1`, as ranks on different nodes talk), the gradient allreduce between two
  ranks of that node (gloo, over TCP), and 1…k processes' FW+BW in lockstep on the node's cores.
- **Predict** (`predict`): each probe repeat becomes a platform (`repeat_text`: studies/cluster_platform's
  yaml, its shared `read_bandwidth` the rate the probe measured with as many readers as the prediction
  has nodes, its `exchange.noise` fitted to the lockstep iteration of as many processes:
  scale/jitter.py), simulated by `hpcshuffle scale`'s engine at seed = the repeat's number. A cell's predicted
  interval is the median and the 10–90 % range over the repeats: how far the answer moves with the
  machine's own variation between probes, and with the simulation's seed. A second, wider interval
  adds the model's own error out of sample, as an earlier comparison of the same kind measured it
  (`model_errors`: each run's measured over simulated epoch, results/reference/cluster, 2026-11-25):
  every repeat's epoch times every one of those ratios, pooled. Nothing is fitted to a run the
  predictions are compared with.
- **Measure** (`measure_all`): every (nodes, strategy) cell `repeats` times, the repeats outermost
  so each cell's runs are spread over the whole measurement.
- **Compare** (`comparison`): per cell, the predicted median [p10, p90] (either interval) beside the
  measured median and range, and whether the measured median lies inside the predicted range.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

import yaml

from hpcshuffle.plan.strategies import get_strategy
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.envelope import envelope
from hpcshuffle.scale.platform_yaml import platform_from_dict
from hpcshuffle.scale.recommend import simulate_each
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.scale.seeds import Spread
from hpcshuffle.studies.cluster import Cluster
from hpcshuffle.studies.cluster_platform import platform_text
from hpcshuffle.studies.cluster_runs import (
    BATCH,
    IMAGE_SIZE,
    MODEL,
    allreduce_probe,
    contention_rates,
    last_json,
    measured_run,
    node_rates,
    pingpong,
    run_line,
    workload,
)
from hpcshuffle.studies.runs import strategy_overrides

LINK_WHERE = "between two ranks of one node through the network module (srun -N 1 -n 2, MPIR_CVAR_NOLOCAL=1)"
ALLREDUCE_WHERE = "srun -N 1 -n 2: two ranks of one node, gloo over TCP"
CONTENTION_ITERATIONS = 60  # FW+BW steps in lockstep per contention probe
INTERVALS = {"epoch_s": "the interval over the probe's repeats alone",
             "with_model_error": "the interval with the model's earlier out-of-sample errors (--past)"}


def probe_once(cluster: Cluster, dataset: Path, files: int, repeats: int, readers: tuple[int, ...]) -> dict:
    """One repeat of the one-node probe: {"node" (with "concurrent": the storage with k readers), "link",
    "allreduce", "intra_node", "contention" (k ranks' FW+BW in lockstep, for each k of `readers`)}, each as
    experiments/cluster_probe.py and scale.pingpong print it."""
    two_ranks = ["srun", *cluster.placement(), "--nodes=1", "--ntasks=2", "--mpi=pmi2"]
    return {"node": node_rates(cluster, dataset, files, repeats, readers),
            "contention": [contention_rates(cluster, k, CONTENTION_ITERATIONS) for k in readers],
            "link": {**last_json(cluster.step(*two_ranks, "env", "MPIR_CVAR_NOLOCAL=1", *pingpong(repeats))),
                     "where": LINK_WHERE},
            "allreduce": {**last_json(cluster.step(*two_ranks, *allreduce_probe(repeats))), "where": ALLREDUCE_WHERE},
            "intra_node": last_json(cluster.step(*two_ranks, *pingpong(repeats)))}


def read_rate(measured: dict, readers: int) -> float:
    """The shared storage's bytes/s with `readers` readers at once, as the probe measured it."""
    rates = {point["readers"]: point["read_Bps"] for point in measured["node"]["concurrent"]}
    if readers not in rates:
        raise ValueError(f"the probe read with {sorted(rates)} readers at once, not {readers}: probe with "
                         f"--readers up to the largest node count to predict")
    return rates[readers]


def repeat_text(settings: dict, measured: dict, dataset: tuple[str, int], nodes: int) -> str:
    """The platform yaml of one probe repeat for predicting `nodes` nodes: cluster_platform's, with the
    shared storage's bandwidth the one measured with `nodes` readers at once (so the per-file latency
    is what a single reader's file took beyond its bytes at that rate) and, where the probe measured it
    (rounds from 2026-11-29 on), the training thread's jitter with `nodes` ranks sharing the cores."""
    node = {**measured["node"], "shared_read_Bps": read_rate(measured, nodes),
            "shared_read_how": f"{nodes} threads reading the dataset's files at once, their bytes/s together"}
    repeat = {**measured, "node": node}
    if "contention" in measured:
        repeat["contention"] = next(c for c in measured["contention"] if c["ranks"] == nodes)
    return platform_text(settings, repeat, 1, MODEL, dataset, IMAGE_SIZE, BATCH,
                         "experiments/scale_probe_predict.py (one probe repeat)")


def scenario_of(label: str, nodes: int, dataset: str, seed: int) -> Scenario:
    """The simulated epoch of a measured cell: `label` (global, local, partial-<q>) on `nodes` ranks."""
    shuffle, _, q = label.partition("-")
    return Scenario(workers=nodes, shuffle=shuffle, q=get_strategy(shuffle).q_for(float(q) if q else None),
                    model=MODEL, dataset=dataset, batch_size=BATCH, seed=seed)


def model_errors(measured_runs: list[dict], simulated_runs: list[dict]) -> list[float]:
    """Measured over simulated epoch of every measured run that has a simulation of the same workers,
    shuffle and q (rows of `hpcshuffle scale --json`'s schema): the model's errors out of sample."""
    simulated = {(row["workers"], row["shuffle"], row["q"]): row["epoch_s"] for row in simulated_runs}
    return [row["epoch_s"] / simulated[key] for row in measured_runs
            if (key := (row["workers"], row["shuffle"], row["q"])) in simulated]


def placements(settings: dict, probes: list[dict], dataset: tuple[str, int], node_counts: list[int],
               labels: list[str]):
    """What a round simulates: ((nodes, label), repeat, platform, scenario) for every probe repeat (its
    platform: `repeat_text`), node count and label, at seed = the repeat's number."""
    for repeat, measured in enumerate(probes):
        for nodes in node_counts:
            platform = platform_from_dict(yaml.safe_load(repeat_text(settings, measured, dataset, nodes)),
                                          f"probe repeat {repeat}, {nodes} readers")
            for label in labels:
                yield (nodes, label), repeat, platform, scenario_of(label, nodes, dataset[0], repeat)


def envelope_cells(placed) -> dict[tuple[int, str], dict]:
    """Per (nodes, label) of `placed` (`placements`): the back-of-envelope epoch (scale/envelope.py) of every
    probe repeat's platform, as a median and p10-p90 over the repeats, the interval built as the model's is.
    It is arithmetic on the probe alone: no knob, no draw, nothing fitted to a run."""
    epochs: dict[tuple[int, str], list[float]] = {}
    for cell, _, platform, scenario in placed:
        epochs.setdefault(cell, []).append(envelope(platform, scenario)["epoch_s"])
    return {cell: Spread.of(values).as_dict() for cell, values in epochs.items()}


def cell_epochs(runs: list[dict], nodes: int, run: str) -> list[float]:
    """The measured epochs of one (nodes, run) cell."""
    return [row["epoch_s"] for row in runs if (row["nodes"], row["run"]) == (nodes, run)]


def round_errors(predicted: dict, measured: dict) -> list[float]:
    """An earlier probe round's errors, measured over predicted: each run's epoch over its cell's median
    over the probe repeats, for a round whose predictions (`predicted.json`) were committed before its runs
    (`measured.json`), so the pool is out of sample; ValueError where the runs predate the predictions."""
    if measured["written"] < predicted["written"]:
        raise ValueError(f"the runs ({measured['written']}) predate the predictions ({predicted['written']}): "
                         "their errors are not out of sample; pass --past a round predicted before it was measured")
    medians = {(cell["nodes"], cell["run"]): cell["epoch_s"]["median"] for cell in predicted["cells"]}
    return [run["epoch_s"] / medians[(run["nodes"], run["run"])] for run in measured["runs"]
            if (run["nodes"], run["run"]) in medians]


def predict(settings: dict, probes: list[dict], dataset: tuple[str, int], node_counts: list[int], labels: list[str],
            progress: Callable[[str], None], jobs: int = 2, errors: list[float] | None = None) -> list[dict]:
    """Per (nodes, label): the simulated epoch at every probe repeat (seed = the repeat's number), and
    their median, p10 and p90 ("epoch_s"); with `errors` (`model_errors`), also the spread of every
    repeat's epoch times every error ("with_model_error")."""
    placed = list(placements(settings, probes, dataset, node_counts, labels))
    runs = [(f"probe {repeat}", platform, scenario) for _, repeat, platform, scenario in placed]
    per_cell: dict[tuple[int, str], list[dict]] = {cell: [] for cell, *_ in placed}
    for (cell, *_), result in zip(placed, simulate_each(runs, progress, jobs, simulate)):
        per_cell[cell].append({"epoch_s": result.epoch_s, **{f"{phase}_s": s for phase, s in result.phases().items()}})
    envelopes = envelope_cells(placed)
    cells_out = []
    for (nodes, label), each in per_cell.items():
        epochs = [r["epoch_s"] for r in each]
        cell = {"nodes": nodes, "run": label, "epoch_s": Spread.of(epochs).as_dict(), "repeats": each,
                "envelope": envelopes[(nodes, label)]}
        if errors:
            cell["with_model_error"] = Spread.of([epoch * error for epoch in epochs for error in errors]).as_dict()
        cells_out.append(cell)
    return cells_out


def measure_all(cluster: Cluster, out: Path, dataset: Path, node_counts: list[int], labels: list[str], repeats: int,
                epochs: int) -> list[dict]:
    """Every (nodes, label) cell measured `repeats` times (repeats outermost), one job each under
    `out`/runs/N<nodes>x1/<label>/r<repeat> (complete runs reused), with a progress line per run."""
    rows = []
    total = repeats * len(node_counts) * len(labels)
    for repeat in range(repeats):
        for nodes in node_counts:
            for label in labels:
                run_dir = out / "runs" / f"N{nodes}x1" / label / f"r{repeat}"
                row = measured_run(cluster, run_dir, nodes, [*workload(dataset), *strategy_overrides(label)], epochs)
                rows.append({**row, "run": label, "repeat": repeat})
                print(f"[{len(rows)}/{total}] repeat {repeat}: {run_line(label, row)}", flush=True)
    return rows


def comparison(predicted: list[dict], measured: list[dict], interval: str) -> tuple[str, int, int]:
    """The table of predicted (each cell's `interval`: "epoch_s" or "with_model_error") against measured
    epochs per cell; how many cells have their measured median inside the predicted [p10, p90], and
    how many cells were measured."""
    lines = [f"{'nodes':>5} {'run':<12} {'predicted median [p10, p90]':>29} {'measured median (min-max, n)':>32}"
             f" {'error':>6}  inside"]
    inside = cells = 0
    for cell in predicted:
        epochs = cell_epochs(measured, cell["nodes"], cell["run"])
        if not epochs:
            continue
        spread, median = cell[interval], statistics.median(epochs)
        hit = spread["p10"] <= median <= spread["p90"]
        inside, cells = inside + hit, cells + 1
        lines.append(f"{cell['nodes']:>5} {cell['run']:<12} {spread['median']:>9.2f} [{spread['p10']:6.2f}, "
                     f"{spread['p90']:6.2f}] {median:>15.2f} ({min(epochs):.2f}-{max(epochs):.2f}, {len(epochs)})"
                     f" {median / spread['median'] - 1:>+6.0%}  {'yes' if hit else 'NO'}")
    lines.append(f"{inside} of {cells} cells have the measured median inside the predicted 10-90 % range")
    return "\n".join(lines), inside, cells


ALPHA = 0.2  # the 80 % interval, p10 to p90
FORECASTS = {"model": "epoch_s", "envelope": "envelope"}  # what is scored: each cell's key in predicted.json
POOLED = {"model_pooled": "with_model_error"}  # scored too where the pool is out of sample (`round_errors`)


def interval_score(low: float, high: float, outcome: float, alpha: float = ALPHA) -> float:
    """Gneiting & Raftery's (2007, Sec. 6.2) score of the central (1 − alpha) interval [low, high] at the
    outcome: its width, plus 2/alpha times how far the outcome falls outside it. Lower is better; a narrow
    interval that misses pays more than a wide one that covers."""
    return (high - low) + 2 / alpha * max(low - outcome, 0.0) + 2 / alpha * max(outcome - high, 0.0)


def scores(cells: list[dict], runs: list[dict], forecasts: dict[str, str] = FORECASTS) -> dict:
    """The model and the envelope scored on the same measured cells: per cell the measured median and each
    forecast's median, 80 % interval, relative error, whether the interval covers the measured median and
    its interval score; overall, per forecast, the median absolute relative error, the coverage (cells
    covered / cells) and the mean interval score (seconds). A cell is scored where it was measured."""
    scored = []
    for cell in cells:
        epochs = cell_epochs(runs, cell["nodes"], cell["run"])
        if not epochs:
            continue
        measured = statistics.median(epochs)
        row = {"nodes": cell["nodes"], "run": cell["run"], "measured_median": measured, "n": len(epochs)}
        for name, key in forecasts.items():
            spread = cell[key]
            row[name] = {**spread, "error": spread["median"] / measured - 1,
                         "covered": spread["p10"] <= measured <= spread["p90"],
                         "interval_score": interval_score(spread["p10"], spread["p90"], measured)}
        scored.append(row)
    overall = {"cells": len(scored), "forecasts": forecasts}
    for name in forecasts:
        overall[f"{name}_median_abs_err"] = statistics.median(abs(row[name]["error"]) for row in scored)
        overall[f"{name}_coverage80"] = sum(row[name]["covered"] for row in scored) / len(scored)
        overall[f"{name}_interval_score"] = statistics.fmean(row[name]["interval_score"] for row in scored)
    return {**overall, "per_cell": scored}


def scores_text(found: dict) -> str:
    """`scores` as compare.txt's last table."""
    lines = ["the model beside the back-of-envelope (scale/envelope.py) on the same cells, 80 % intervals "
             "(p10-p90 over the probe repeats)",
             f"{'nodes':>5} {'run':<12} {'measured':>9}"
             + "".join(f" {name + ' [p10, p90]':>26} {'err':>6} {'IS':>6}" for name in found["forecasts"])]
    for row in found["per_cell"]:
        line = f"{row['nodes']:>5} {row['run']:<12} {row['measured_median']:>9.2f}"
        for name in found["forecasts"]:
            f = row[name]
            miss = " " if f["covered"] else "*"
            line += (f" {f['median']:>9.2f} [{f['p10']:6.2f}, {f['p90']:6.2f}]{miss}"
                     f" {f['error']:>+6.0%} {f['interval_score']:>6.2f}")
        lines.append(line)
    lines.append("err: predicted over measured, − 1; * the interval misses the measured median; IS: the interval score, seconds (lower is better)")
    for name in found["forecasts"]:
        lines.append(f"{name:<12} median |error| {found[f'{name}_median_abs_err']:.1%}, coverage "
                     f"{found[f'{name}_coverage80']:.0%} of {found['cells']} cells, mean interval score "
                     f"{found[f'{name}_interval_score']:.2f} s")
    return "\n".join(lines)


def prediction_text(written: str, past: str, cells: list[dict]) -> str:
    """The predictions' table: per cell both intervals (`predict` with errors), as committed before any
    run; `past`: where the model's errors came from."""
    lines = [f"predicted {written}: seconds per epoch after the first, slowest rank, median [p10, p90]",
             f"{'nodes':>5} {'run':<12} {'over the probe repeats':>28} {'with the model errors':>28}"]
    for cell in cells:
        lines.append(f"{cell['nodes']:>5} {cell['run']:<12} " + " ".join(
            f"{c['median']:>9.2f} [{c['p10']:6.2f}, {c['p90']:6.2f}]   " for c in (cell['epoch_s'],
                                                                             cell['with_model_error'])).rstrip())
    return "\n".join(lines) + f"\nmodel errors from {past}\n"


def comparison_text(where: str, predicted: dict, measured: dict) -> str:
    """`comparison` under each of INTERVALS, headed by when the predictions (from `where`/probes.json)
    and the runs were made: predicted.json's and measured.json's documents."""
    text = (f"predicted {predicted['written']} from {where}/probes.json (one node), measured from {measured['written']}; "
            "seconds per epoch after the first, slowest rank")
    for interval, title in INTERVALS.items():
        text += f"\n{title}\n{comparison(predicted['cells'], measured['runs'], interval)[0]}\n"
    return text
