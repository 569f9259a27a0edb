"""The cluster scaling experiment's tables and figure (experiments/cluster_scaling.py): each strategy
per node count against LS, measured against simulated, epoch time against nodes."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.analysis.plots import plot_curves
from hpcshuffle.plan import run_label
from hpcshuffle.studies.cluster_runs import PHASE_KEYS, STRATEGIES


def scaling_table(rows: list[dict], extras: dict[tuple[int, str], dict]) -> str:
    """Each run's epoch and phases (`extras`: its steady means by (nodes, label), for the samples read from
    /pfs and sent), then each strategy's epoch against LS's at the same node count."""
    lines = ["seconds per epoch after the first (epoch: slowest rank; phases: mean over ranks); shared: samples "
             "read from /pfs per epoch, sent: samples exchanged per epoch",
             f"{'nodes':>5} {'M':>3} {'run':<12} {'epoch':>7} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} "
             f"{'vs LS':>6} {'shared':>7} {'sent':>6}"]
    local = {row["nodes"]: row["epoch_s"] for row in rows if row["shuffle"] == "local"}
    for row in rows:
        label, extra = run_label(row["shuffle"], row["q"]), extras[(row["nodes"], run_label(row["shuffle"], row["q"]))]
        ratio = f"{row['epoch_s'] / local[row['nodes']]:.2f}" if row["nodes"] in local else "-"
        lines.append(f"{row['nodes']:>5} {row['workers']:>3} {label:<12} {row['epoch_s']:>7.2f} {row['io_s']:>7.2f} "
                     f"{row['exchange_s']:>8.2f} {row['fwbw_s']:>7.2f} {row['allreduce_s']:>9.2f} {ratio:>6} "
                     f"{extra['read_shared']:>7.0f} {extra['sent']:>6.0f}")
    nodes = sorted({row["nodes"] for row in rows})
    labels = [label for label in STRATEGIES if label != "local"]
    lines += ["", "epoch against LS's at the same node count",
              f"{'nodes':>5} " + " ".join(f"{label + '/LS':>16}" for label in labels)]
    by = {(row["nodes"], run_label(row["shuffle"], row["q"])): row["epoch_s"] for row in rows}
    for count in nodes:
        cells = [f"{by[(count, l)] / by[(count, 'local')]:>16.2f}" if (count, l) in by and (count, "local") in by
                 else f"{'-':>16}" for l in labels]
        lines.append(f"{count:>5} " + " ".join(cells))
    return "\n".join(lines)


def comparison_table(rows: list[dict], predicted: dict) -> str:
    """Measured against simulated epochs and phases, with the epoch's error."""
    simulated = {(r["workers"], run_label(r["shuffle"], r["q"])): r for r in predicted["runs"]}
    lines = [f"`hpcshuffle scale --platform {predicted['platform']}` against the measured runs (seconds per epoch; "
             "each phase measured/simulated)",
             f"{'nodes':>5} {'run':<12} {'measured':>9} {'simulated':>9} {'error':>7}   "
             + " ".join(f"{p:>13}" for p in PHASE_KEYS[1:])]
    errors = []
    for row in rows:
        label = run_label(row["shuffle"], row["q"])
        twin = simulated.get((row["workers"], label))
        if twin is None:
            continue
        error = twin["epoch_s"] / row["epoch_s"] - 1
        errors.append(abs(error))
        lines.append(f"{row['nodes']:>5} {label:<12} {row['epoch_s']:>9.2f} {twin['epoch_s']:>9.2f} {error:>+7.0%}   "
                     + " ".join(f"{row[p + '_s']:>6.2f}/{twin[p + '_s']:<6.2f}" for p in PHASE_KEYS[1:]))
    if errors:
        lines.append(f"epoch error: median {sorted(errors)[len(errors) // 2]:.0%}, largest {max(errors):.0%} "
                     f"over {len(errors)} runs (the platform holds measured rates only: nothing fitted to these runs)")
    return "\n".join(lines)


def plot(rows: list[dict], predicted: dict | None, path: Path) -> None:
    """Epoch time against nodes per strategy: measured (solid) and simulated (dashed, the same colour)."""
    curves: dict[str, dict[int, float]] = {}
    styles: dict[str, dict] = {}
    colours = {label: f"C{index}" for index, label in enumerate(STRATEGIES)}
    for row in rows:
        label = run_label(row["shuffle"], row["q"])
        curves.setdefault(label, {})[row["nodes"]] = row["epoch_s"]
        styles[label] = {"color": colours.get(label)}
    per_node = {row["workers"]: row["nodes"] for row in rows}
    for twin in (predicted or {}).get("runs", []):
        label = run_label(twin["shuffle"], twin["q"])
        if twin["workers"] in per_node and label in curves:
            curves.setdefault(f"{label} (SimGrid)", {})[per_node[twin["workers"]]] = twin["epoch_s"]
            styles[f"{label} (SimGrid)"] = {"color": colours.get(label), "linestyle": "--", "marker": "x"}
    plot_curves(curves, "seconds per epoch (slowest rank)", path, xlabel="nodes",
                title="Strong scaling on the namespace cluster (one dataset on /pfs)", styles=styles)

