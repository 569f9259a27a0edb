"""Compare runs: the Fig. 10-style breakdown per run, epoch time relative to local shuffling, the
Fig. 5-style validation curves (and shuffle-quality curves where runs record `mixing`), their PNG
figures, and a one-row-per-run summary (CSV) of a results tree for tuning q (`hpcshuffle.analysis.tune`)."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import yaml

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import run_label as strategy_label
from hpcshuffle.plan import with_role
from hpcshuffle.training.metrics import (
    AU_THRESHOLDS,
    PHASES,
    record_util,
    run_au,
    validation_score,
)


def steady_means(records: list[dict], skip_first: bool) -> dict[str, float | None]:
    """Per-epoch means of the phase times (epoch: slowest rank; others: mean over ranks), of the
    samples sent and read from shared storage, and of the utilisation (`util`: mean over ranks;
    `util_min` / `util_max`: the least and most utilised rank's, None for runs written before `util`);
    the first epoch is left out when there are several and `skip_first` is set, since it pays
    start-up costs."""
    steady = records[1:] if skip_first and len(records) > 1 else records
    means = {}
    for phase in PHASES:
        stat = "max" if phase == "epoch" else "mean"
        means[phase] = sum(r["time"][phase][stat] for r in steady) / len(steady)
    for counter in ("sent", "read_shared"):
        means[counter] = sum(r["samples"][counter] for r in steady) / len(steady)
    means["util"] = sum(record_util(r) for r in steady) / len(steady)
    known = all("util" in r for r in steady)
    for stat in ("min", "max"):
        means[f"util_{stat}"] = sum(r["util"][stat] for r in steady) / len(steady) if known else None
    return means


def run_summary(run_dir: Path, skip_first: bool) -> dict:
    """Mean over epochs (the first left out when there are several: it pays start-up costs)."""
    records = read_jsonl(run_dir / "metrics.jsonl", partial_last=True)
    if not records:
        raise ValueError(f"{run_dir}/metrics.jsonl holds no epochs")
    last = records[-1]
    return {
        "run": run_dir.name,
        "shuffle": last["shuffle"],
        "q": last["q"],
        "workers": last["workers"],
        "epochs": len(records),
        "val": validation_score(last),
        "au": run_au(records),
        **steady_means(records, skip_first),
    }


def breakdown_table(run_dirs: list[Path], skip_first: bool = True) -> str:
    """The per-phase breakdown of each run in `run_dirs`, one line per run: seconds per epoch, epoch
    time relative to local shuffling's, samples sent and read from shared storage, the validation
    score and utilisation. FileNotFoundError for a directory without metrics.jsonl."""
    for run_dir in run_dirs:
        if not (run_dir / "metrics.jsonl").exists():
            raise FileNotFoundError(f"{run_dir} has no metrics.jsonl; is it a run directory?")
    rows = [run_summary(d, skip_first) for d in run_dirs]
    # "vs LS": epoch time over the baseline strategy's (local shuffling, which moves nothing)
    baseline = [r["epoch"] for r in rows if r["shuffle"] == with_role("baseline").name]
    lines = [
        "seconds per epoch, mean over ranks (epoch: slowest rank), "
        + ("epochs after the first" if skip_first else "all epochs")
        + "; util: (fwbw + allreduce) / epoch, mean over ranks (ranks: least-most utilised rank)",
        f"{'shuffle':>8} {'q':>5} {'M':>3} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} "
        f"{'epoch':>7} {'vs LS':>6} {'sent':>7} {'shared':>7} {'val':>8} {'util':>5} {'ranks':>8} {'AU':>4}",
    ]
    for r in rows:
        ratio = f"{r['epoch'] / baseline[0]:.2f}" if baseline else "-"
        au = "-" if r["au"] is None else f"{r['au']:.0%}"
        lines.append(
            f"{r['shuffle']:>8} {r['q']:>5.2f} {r['workers']:>3} {r['io']:>7.2f} {r['exchange']:>8.2f} "
            f"{r['fwbw']:>7.2f} {r['allreduce']:>9.2f} {r['epoch']:>7.2f} {ratio:>6} {r['sent']:>7.0f} "
            f"{r['read_shared']:>7.0f} {r['val']:>8.2f} {r['util']:>5.0%} {util_range(r):>8} {au:>4}"
        )
    return "\n".join(lines + [AU_LEGEND])


AU_LEGEND = ("AU: MLPerf Storage's accelerator utilisation, FW+BW over the run's wall time less its first step's "
             "I/O, every epoch (DLIO, which MLPerf Storage runs, also leaves every later epoch's first step out: "
             "docs/peers.md); a run qualifies at "
             + ", ".join(f"{value:.0%} ({model})" for model, value in AU_THRESHOLDS.items())
             + "; a reading order of its own (LS, PLS) belongs in its open division")


def util_range(means: dict) -> str:
    """'55-70%': the least and most utilised rank's utilisation; '-' for runs written before `util`."""
    if means["util_min"] is None:
        return "-"
    return f"{means['util_min'] * 100:.0f}-{means['util_max']:.0%}"


# -- curves per epoch (Fig. 5) and the figures -------------------------------------------------

SCORE_UNITS = {"val_top1": "top-1 %", "val_iou": "mean IoU %"}


def _score(record: dict) -> tuple[str | None, float | None]:
    if "val_top1" not in record and "val_iou" not in record:
        return None, None
    return ("val_top1" if "val_top1" in record else "val_iou"), validation_score(record)


def run_label(record: dict, with_workers: bool) -> str:
    """'global', 'local', 'partial-0.3' ('partial-0.3-node' where a node's ranks shared its partition);
    with workers: 'partial-0.3-M4' ('M4v': virtual workers)."""
    label = strategy_label(record["shuffle"], record["q"], record.get("scope"))
    if with_workers:
        label += f"-M{record['workers']}" + ("v" if record.get("virtual_workers") else "")
    return label


def load_runs(run_dirs: list[Path]) -> dict[str, list[dict]]:
    """Each run's epoch records under its label (workers shown when the runs differ in them; the
    directory name added where labels would still repeat), in the order given."""
    runs = []
    for run_dir in run_dirs:
        records = read_jsonl(Path(run_dir) / "metrics.jsonl", partial_last=True)
        if not records:
            raise ValueError(f"{run_dir}/metrics.jsonl holds no epochs")
        runs.append((Path(run_dir), records))
    with_workers = len({(r[-1]["workers"], bool(r[-1].get("virtual_workers"))) for _, r in runs}) > 1
    labels = [run_label(records[-1], with_workers) for _, records in runs]
    return {
        label if labels.count(label) == 1 else f"{label} ({run_dir.name})": records
        for label, (run_dir, records) in zip(labels, runs)
    }


def score_value(record: dict) -> float | None:
    """The epoch's validation score in % (top-1, or mean IoU); None when it has none."""
    return _score(record)[1]


def mixing_quality(record: dict) -> float | None:
    """The epoch's cumulative pair-mixing quality, C / C_GS (analysis/quality.py); None when not recorded."""
    return (record.get("mixing") or {}).get("quality")


def label_skew(record: dict) -> float | None:
    """The epoch's label skew: how much more often two samples of a worker's batch share a class than
    two of the global batch (`mixing.labels.excess`, analysis/labels.py)."""
    return ((record.get("mixing") or {}).get("labels") or {}).get("excess")


def curves(runs: dict[str, list[dict]], metric) -> dict[str, dict[int, float]]:
    """label → {epoch: metric(record)}, leaving out epochs where `metric` gives None."""
    return {
        label: {r["epoch"]: value for r in records if (value := metric(r)) is not None}
        for label, records in runs.items()
    }


def curve_table(title: str, label_curves: dict[str, dict[int, float]], digits: int) -> str:
    """One row per epoch, one column per run; '-' where a run has no value for that epoch."""
    epochs = sorted({epoch for curve in label_curves.values() for epoch in curve})
    widths = [max(8, len(label)) for label in label_curves]
    lines = [title, f"{'epoch':>5} " + " ".join(f"{label:>{w}}" for label, w in zip(label_curves, widths))]
    for epoch in epochs:
        cells = [f"{curve[epoch]:>{w}.{digits}f}" if epoch in curve else f"{'-':>{w}}"
                 for curve, w in zip(label_curves.values(), widths)]
        lines.append(f"{epoch:>5} " + " ".join(cells))
    return "\n".join(lines)


def _score_units(runs: dict[str, list[dict]]) -> str:
    units = sorted({SCORE_UNITS[name] for records in runs.values() for r in records if (name := _score(r)[0])})
    return " / ".join(units) or "none recorded"


def curve_tables(run_dirs: list[Path]) -> str:
    """The validation curves table, and the shuffle-quality and label-skew ones when any run records them."""
    runs = load_runs(run_dirs)
    title = f"validation score per epoch ({_score_units(runs)})"
    tables = [curve_table(title, curves(runs, score_value), digits=2)]
    quality = curves(runs, mixing_quality)
    if any(quality.values()):
        tables.append(curve_table("shuffle quality per epoch (mixing.quality)", quality, digits=3))
    skew = curves(runs, label_skew)
    if any(skew.values()):
        tables.append(curve_table("label skew per epoch (mixing.labels.excess; 0: as global shuffling)", skew,
                                  digits=3))
    return "\n\n".join(tables)


def write_plots(run_dirs: list[Path], plot_dir: Path, skip_first: bool = True) -> list[Path]:
    """breakdown.png, accuracy.png and, when runs record them, quality.png and label_skew.png in `plot_dir`
    (created if missing); returns the paths written."""
    from hpcshuffle.analysis.plots import plot_breakdown, plot_curves

    plot_dir = Path(plot_dir)
    try:
        plot_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create {plot_dir} ({err.strerror}); pass --plot with a writable directory") from err
    runs = load_runs(run_dirs)
    paths = [plot_dir / "breakdown.png", plot_dir / "accuracy.png"]
    plot_breakdown({label: steady_means(records, skip_first) for label, records in runs.items()}, paths[0])
    plot_curves(curves(runs, score_value), f"validation score ({_score_units(runs)})", paths[1])
    quality = curves(runs, mixing_quality)
    if any(quality.values()):
        paths.append(plot_dir / "quality.png")
        plot_curves(quality, "shuffle quality (mixing.quality)", paths[-1])
    skew = curves(runs, label_skew)
    if any(skew.values()):
        paths.append(plot_dir / "label_skew.png")
        plot_curves(skew, "label skew (mixing.labels.excess)", paths[-1])
    return paths


# -- a results tree, one row per run ---------------------------------------------------------

SUMMARY_COLUMNS = (
    "run", "shuffle", "q", "workers", "partition", "batch_size", "model", "norm", "dataset", "seed",
    "epochs_done", "epochs_planned", "complete", "score_name", "final_score", "best_score", "mixing", "label_skew",
    "epoch_s", "io_s", "exchange_s", "fwbw_s", "allreduce_s", "util", "sent_per_epoch", "read_shared_per_epoch",
)


def _natural_key(path: Path) -> list:
    # Hydra numbers sweep jobs 0, 1, ..., 10: order them as numbers, not as text
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def find_runs(root: Path) -> list[Path]:
    """Every directory under `root` (root included) that holds a metrics.jsonl, in natural order."""
    return sorted((path.parent for path in Path(root).rglob("metrics.jsonl") if path.is_file()), key=_natural_key)


def run_row(run_dir: Path, name: str) -> dict:
    """One run's summary row (SUMMARY_COLUMNS); scores and times are None before its first epoch."""
    config_path = run_dir / "config.yaml"
    config = (yaml.safe_load(config_path.read_text()) or {}) if config_path.exists() else {}
    records = read_jsonl(run_dir / "metrics.jsonl", partial_last=True)
    shuffle_config, model = config.get("shuffle") or {}, config.get("model") or {}
    last = records[-1] if records else {}
    epochs_planned = config.get("epochs")
    score_name, final_score = _score(last)
    scores = [score for score in (_score(r)[1] for r in records) if score is not None]
    row = {
        "run": name,
        "shuffle": last.get("shuffle", shuffle_config.get("name")),
        "q": last.get("q", shuffle_config.get("q")),
        "workers": last.get("workers"),
        "partition": last.get("partition", (config.get("storage") or {}).get("partition")),
        "batch_size": last.get("batch_size", config.get("batch_size")),
        "model": model.get("name"),
        "norm": model.get("norm", "worker") if model else None,  # runs before model.norm: per worker
        "dataset": (config.get("dataset") or {}).get("format"),
        "seed": config.get("seed"),
        "epochs_done": len(records),
        "epochs_planned": epochs_planned,
        "complete": epochs_planned is not None and len(records) >= epochs_planned,
        "score_name": score_name,
        "final_score": final_score,
        "best_score": max(scores) if scores else None,
        "mixing": mixing_quality(last),
        "label_skew": label_skew(last),
    }
    means = steady_means(records, skip_first=True) if records else {}
    for phase in PHASES:
        row[f"{phase}_s"] = means.get(phase)
    row["util"] = means.get("util")
    row["sent_per_epoch"] = means.get("sent")
    row["read_shared_per_epoch"] = means.get("read_shared")
    return row


def collect(run_dirs: list[Path]) -> list[dict]:
    """One summary row per run directory; `run` is its path relative to the runs' common root."""
    run_dirs = [Path(d).resolve() for d in run_dirs]
    if not run_dirs:
        return []
    root = Path(os.path.commonpath(run_dirs))
    if root in run_dirs:  # name a run by at least its own directory
        root = root.parent
    return [run_row(d, str(d.relative_to(root))) for d in run_dirs]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def write_summary_csv(rows: list[dict], path: Path) -> Path:
    """`rows` as CSV with a header (SUMMARY_COLUMNS order); floats to 4 decimals, None empty."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(SUMMARY_COLUMNS)
        for row in rows:
            writer.writerow([_cell(row.get(column)) for column in SUMMARY_COLUMNS])
    return path
