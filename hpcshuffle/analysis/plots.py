"""PNG figures of the analyses: Fig. 6's imbalance boxes, the model's epoch time vs nodes, and the
report's per-run breakdown bars (Fig. 10) and curves per epoch (Fig. 5).

matplotlib is imported inside the functions, and only its Agg canvas is used, so importing this
module is free and no global pyplot state or display is touched.
"""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.analysis.imbalance import ImbalanceResult
from hpcshuffle.analysis.model import (
    METHODS,
    EpochPrediction,
    ModelParams,
    crossover_nodes,
    sample_io_time_s,
)

METHOD_LABELS = {"regular": "regular (PFS)", "cache": "distributed cache (7)", "locality": "locality-aware (8)"}
PHASE_LABELS = {"io": "I/O", "exchange": "exchange", "fwbw": "FW+BW", "allreduce": "GE+WU (allreduce)"}


def new_figure(width_in: float, height_in: float):
    """A matplotlib Figure of `width_in` × `height_in` inches with its own Agg canvas (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save(figure, path: Path) -> None:
    """Write `figure` to `path` at 120 dpi; ValueError naming the path when it cannot be written."""
    try:
        figure.savefig(path, dpi=120)
    except OSError as err:
        raise ValueError(f"cannot write {path} ({err.strerror}); pass --plot with a writable path") from err


def finish(figure, axes, xlabel: str, ylabel: str, title: str | None, path: Path) -> None:
    """Label the axes, title the plot when given one, add the legend and write it to `path`."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.legend(fontsize="small")
    save(figure, path)


def plot_imbalance(results: list[ImbalanceResult], path: Path) -> None:
    """Box plot of the per-step imbalance, grouped by node count and coloured by local batch (Fig. 6)."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    node_counts = sorted({r.num_nodes for r in results})
    batch_sizes = sorted({r.batch_size for r in results})
    colours = {b: colormaps["tab10"](index) for index, b in enumerate(batch_sizes)}
    figure = new_figure(max(6.0, 1.2 + 0.45 * len(results)), 4.0)
    axes = figure.add_subplot()
    for result in results:
        # one slot per batch size inside a node-count group, and an empty slot between groups
        group = node_counts.index(result.num_nodes)
        position = group * (len(batch_sizes) + 1) + batch_sizes.index(result.batch_size)
        (first, third), (low, high) = result.quartiles_pct, result.whiskers_pct
        stats = {"med": result.median_pct, "q1": first, "q3": third, "whislo": low, "whishi": high,
                 "fliers": result.fliers_pct}
        boxes = axes.bxp([stats], positions=[position], widths=0.7, patch_artist=True,
                         medianprops={"color": "black"}, flierprops={"markersize": 2})
        boxes["boxes"][0].set_facecolor(colours[result.batch_size])
    centres = [group * (len(batch_sizes) + 1) + (len(batch_sizes) - 1) / 2 for group in range(len(node_counts))]
    axes.set_xticks(centres, [f"p = {p}" for p in node_counts])
    axes.set_ylabel("imbalance (% of the global batch p·b)")
    axes.set_title("Global mini-batch imbalance over node caches (simulated)")
    axes.legend(handles=[Patch(color=colours[b], label=f"b = {b}") for b in batch_sizes], title="local batch")
    save(figure, path)


def plot_model(params: ModelParams, predictions: list[EpochPrediction], path: Path) -> None:
    """Predicted epoch time vs nodes for each loading method, with the training time (1) and D/R (2)."""
    node_counts = [row.num_nodes for row in predictions]
    figure = new_figure(6.0, 4.0)
    axes = figure.add_subplot()
    for method in METHODS:
        axes.plot(node_counts, [getattr(row, method).epoch_s for row in predictions], marker="o",
                  label=METHOD_LABELS[method])
    axes.plot(node_counts, [row.training_s for row in predictions], linestyle="--", color="grey",
              label="training D/(p·V) (1)")
    axes.axhline(sample_io_time_s(params), linestyle=":", color="grey", label="storage I/O D/R (2)")
    axes.axvline(crossover_nodes(params), linestyle="-.", color="lightgrey", label="p = R/V (5)")
    # epoch times span orders of magnitude, so both axes are logarithmic
    axes.set_xscale("log", base=2)
    axes.set_xticks(node_counts, [str(p) for p in node_counts])
    axes.set_yscale("log")
    axes.set_xlabel("nodes p")
    axes.set_ylabel("predicted epoch time (s)")
    axes.set_title(f"Epoch time model, D = {params.num_samples} samples")
    axes.legend(fontsize="small")
    save(figure, path)


def plot_breakdown(means: dict[str, dict[str, float]], path: Path) -> None:
    """One stacked bar per run (label → steady_means) of the seconds per epoch in each phase, mean over
    ranks, with the slowest rank's epoch time marked (Fig. 10) and the accelerator utilisation (mean over
    ranks) written above the bar."""
    labels = list(means)
    positions = range(len(labels))
    figure = new_figure(max(6.0, 3.5 + 0.8 * len(labels)), 4.0)
    axes = figure.add_subplot()
    bottoms = [0.0] * len(labels)
    for phase, name in PHASE_LABELS.items():
        heights = [means[label][phase] for label in labels]
        axes.bar(positions, heights, bottom=bottoms, width=0.6, label=name)
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
    axes.scatter(positions, [means[label]["epoch"] for label in labels], marker="_", s=400, color="black",
                 label="epoch (slowest rank)")
    for position, bottom, label in zip(positions, bottoms, labels):
        axes.annotate(f"util {means[label]['util']:.0%}", (position, max(bottom, means[label]["epoch"])),
                      xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize="small")
    axes.margins(y=0.15)  # room above the tallest bar for its label
    crowded = len(labels) > 4
    axes.set_xticks(positions, labels, rotation=30 if crowded else 0, ha="right" if crowded else "center")
    axes.set_ylabel("seconds per epoch (mean over ranks)")
    axes.set_title("Epoch time breakdown")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, not over them
    save(figure, path)


def plot_curves(curves: dict[str, dict[int, float]], ylabel: str, path: Path, xlabel: str = "epoch",
                title: str | None = None, log_x: bool = False,
                bands: dict[str, dict[int, tuple[float, float]]] | None = None,
                styles: dict[str, dict] | None = None) -> None:
    """One line per run (label → {x: value}) against x, the epoch by default (Fig. 5) or e.g. the
    worker count with `log_x` (Fig. 6); runs without values are left out. `bands` shades an
    interval (label → {x: (low, high)}) around a line, e.g. a 95 % interval over seeds; `styles`
    gives a line matplotlib's keywords (label → e.g. {"color": "C0", "linestyle": "--"})."""
    from matplotlib.ticker import MaxNLocator

    figure = new_figure(6.0, 4.0)
    axes = figure.add_subplot()
    xs = sorted({x for curve in curves.values() for x in curve})
    for label, curve in curves.items():
        if curve:
            points = sorted(curve)
            line, = axes.plot(points, [curve[x] for x in points], **{"marker": "o", **(styles or {}).get(label, {})},
                              label=label)
            band = (bands or {}).get(label)
            if band:
                shaded = sorted(band)
                axes.fill_between(shaded, [band[x][0] for x in shaded], [band[x][1] for x in shaded],
                                  color=line.get_color(), alpha=0.2, linewidth=0)
    if log_x:
        axes.set_xscale("log", base=2)
        axes.set_xticks(xs, [str(x) for x in xs])
    elif all(isinstance(x, int) for x in xs):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs: no half epochs on the axis
    finish(figure, axes, xlabel, ylabel, title, path)


def plot_scatter(groups: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, path: Path,
                 title: str | None = None) -> None:
    """One marker colour per group (label → [(x, y)]), with a zero line: e.g. each run's accuracy
    gap to global shuffling against its shuffle quality."""
    figure = new_figure(6.0, 4.0)
    axes = figure.add_subplot()
    for label, pairs in groups.items():
        if pairs:
            axes.scatter([x for x, _ in pairs], [y for _, y in pairs], label=label, alpha=0.7)
    axes.axhline(0.0, color="grey", linewidth=0.8)
    finish(figure, axes, xlabel, ylabel, title, path)
