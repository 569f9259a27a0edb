"""The accuracy study: does local shuffling lose accuracy beyond the noise at CPU scale, and how much
of it does partial shuffling's q win back? (Nguyen et al. §V-E, Fig. 5-6.)

Each (partition, M, strategy) cell is one Hydra multirun over its seeds, M virtual workers in one
process (exactly synchronous SGD with BatchNorm over each worker's local batch):

    python -m hpcshuffle.train -m shuffle=partial shuffle.q=0.3 shuffle.virtual_workers=16
        storage.partition=contiguous seed=0,1,2 hydra.sweep.dir=<out>/contiguous/M16/partial-0.3 ...

`--jobs` cells run at a time; seeds already complete under `--out` are reused, so the study can
be extended or resumed. Then it writes `<json>` (the points with 95 % intervals over seeds, the
local-vs-global gap per cell, the smallest q whose interval reaches global shuffling's: overlaps it
or lies above; and how well the `mixing` quality predicts the gap), `<figures>/accuracy_study.txt`,
the curves per epoch with interval bands (`accuracy_<partition>_M<M>.png`), the q-recovery curves
(`q_recovery_<partition>.png`) and the quality-vs-gap plot (`quality_vs_gap.png`).

    python experiments/accuracy_study.py [--workers 16 64] [--partitions random contiguous]
        [--strategies global local partial-0.1 ...] [--seeds 3] [--epochs 12] [--jobs 2]
        [--dataset synthetic|digits] [--out results/experiments/accuracy_study] [--json PATH]
        [--figures DIR] [--into MAIN_JSON] [override ...]

Trailing overrides follow the defaults below and win over them, e.g. `model=inceptionv4_small`.
Global shuffling has no partition: its runs are trained under the first partition and stand for
the others. A variant (`--dataset digits`, `model.norm=global`) files itself under the main
study's JSON with `--into`, keyed `<dataset>/<norm>`; every row, cell and run names both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import yaml

from hpcshuffle.analysis.intervals import interval95
from hpcshuffle.analysis.labels import balanced_labels, plan_quality, predict_q
from hpcshuffle.analysis.plots import plot_curves, plot_scatter
from hpcshuffle.analysis.report import collect, find_runs
from hpcshuffle.analysis.study import (
    points,
    quality_vs_gap,
    study_table,
    summary,
)
from hpcshuffle.analysis.tune import tune_q, tune_table
from hpcshuffle.formats import digits, get_format
from hpcshuffle.plan import PlanSpec, get_strategy, with_role
from hpcshuffle.studies.runs import REPO, records, strategy_overrides
from hpcshuffle.training.metrics import validation_score

# --dataset: synthetic: 4,096 32×32 images of 20 close classes (one dataset for every seed); digits:
# scikit-learn's 1,438 real handwritten training digits of 10 classes, 32×32. Either lies class after
# class on disk, as an ImageFolder lists it.
DATASETS = {
    "synthetic": ["dataset.root=data/experiments/synthetic-4096x20", "dataset.synthesize.samples=4096",
                  "dataset.synthesize.classes=20", "++dataset.synthesize.seed=0"],
    "digits": ["dataset=digits", "dataset.root=data/experiments/digits"],
}
# b = 8 per worker, a warm-up and a cosine decay so the last epochs are stable, and the learning rate
# scaled with the global batch from 0.05 at 128 (M = 16)
DEFAULT_OVERRIDES = [
    "batch_size=8", "loader.workers=1", "optim.lr=0.05", "optim.reference_batch=128", "optim.schedule=cosine",
    "optim.warmup=2",
]
SKEW_TOLERANCE = 0.01  # tune-q --predict's default: label skew a q may exceed global shuffling's by
STRATEGIES = ["global", "local", "partial-0.1", "partial-0.3", "partial-0.6", "partial-1"]


def label(strategy: str) -> str:
    return strategy.replace("partial-", "partial q=")


def cell_dir(out: Path, partition: str, workers: int, strategy: str) -> Path:
    return out / partition / f"M{workers}" / strategy


def has_partition(strategy: str) -> bool:
    """Whether a strategy's plan reads storage.partition; one that reads shared storage (global) has no
    partition, so the study trains its runs once, under the first partition, for every partition's cell."""
    return get_strategy(strategy.split("-")[0]).node_scope


def runs_dir(out: Path, first: str, partition: str, workers: int, strategy: str) -> Path:
    """Where the runs of a cell lie: its own directory, or the first partition's where the strategy has none."""
    return cell_dir(out, partition if has_partition(strategy) else first, workers, strategy)


def missing_seeds(cell: Path, seeds: int, epochs: int) -> list[int]:
    """The seeds of a cell still to train; a seed's run cut short is removed, to be trained again."""
    missing = []
    for seed in range(seeds):
        run = cell / f"seed{seed}"
        if len(records(run)) >= epochs:
            continue
        if run.exists():
            shutil.rmtree(run)
        missing.append(seed)
    return missing


def run_cell(out: Path, partition: str, workers: int, strategy: str, seeds: int, epochs: int,
             overrides: list[str]) -> str:
    """Train a cell's missing seeds as one Hydra multirun; returns a line saying what happened."""
    cell = cell_dir(out, partition, workers, strategy)
    todo = missing_seeds(cell, seeds, epochs)
    if not todo:
        return f"  {cell}: {seeds} seeds complete, reused"
    command = [
        sys.executable, "-m", "hpcshuffle.train", "-m", *overrides, *strategy_overrides(strategy),
        f"storage.partition={partition}", f"shuffle.virtual_workers={workers}", "storage.scope=rank",
        f"epochs={epochs}", f"seed={','.join(map(str, todo))}", f"hydra.sweep.dir={cell}",
        "hydra.sweep.subdir=seed${seed}", "checkpoint.every_epochs=0", "progress=false",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the multirun of {cell} failed (exit {result.returncode}):\n"
                           f"{result.stdout[-2000:]}{result.stderr[-3000:]}")
    return f"  {cell}: seeds {todo} trained in {time.perf_counter() - start:.0f} s"


def epoch_bands(cell: Path, strategy: str, seeds: int):
    """Per epoch the mean validation top-1 over seeds and its 95 % interval."""
    runs = [records(cell / f"seed{seed}") for seed in range(seeds)]
    epochs = min(len(run) for run in runs)
    means, bands = {}, {}
    for epoch in range(epochs):
        mean, low, high = interval95([validation_score(run[epoch]) for run in runs], f"{strategy} epoch {epoch}")
        means[epoch], bands[epoch] = mean, (low, high)
    return means, bands


def _strategy_of(row: dict) -> str:
    """A study row's strategy as the command line names it (partial-<q>)."""
    return f"partial-{row['q']:g}" if row["strategy"] == "partial" else row["strategy"]


def training_labels(dataset: dict, samples: int):
    """The training labels in listing order of a run's dataset, from its config alone where it can (no
    image read): the synthetic ImageFolder lists its C balanced classes class by class, digits' split is
    a function of its seed; any other dataset is listed."""
    spec = dataset["synthesize"]
    if dataset["format"] == "digits":
        labels = digits.train_labels(spec["val_fraction"], spec["seed"])
    elif dataset["format"] == "imagefolder" and spec:
        labels = balanced_labels(samples, spec["classes"])
    else:
        dataset_format = get_format(dataset["format"])
        labels = dataset_format.scan(Path(dataset["root"]), dataset_format.splits[0]).labels
    if len(labels) != samples:
        raise RuntimeError(f"{dataset['root']}: the run trained on {samples} samples but its config lists {len(labels)}")
    return labels


def run_plan(run_dir: Path) -> tuple[PlanSpec, str, int, object]:
    """(the run's plan spec, its strategy, its epochs, its training labels): a plan is a pure function of
    the run's config."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    run = records(run_dir)
    first = run[0]
    labels = training_labels(config["dataset"], first["num_samples"])
    spec = PlanSpec(first["num_samples"], first["workers"], first["batch_size"], first["q"], config["seed"],
                    first["ranks_per_node"], first["partition"], first["shard_samples"], first["shuffle_buffer"])
    return spec, first["shuffle"], len(run), labels


def replayed_label_skew(run_dir: Path) -> list[float]:
    """The label skew (mixing.labels.excess) of each epoch of a run, replayed from its plan, so runs
    trained before label skew was recorded get it too."""
    spec, shuffle, epochs, labels = run_plan(run_dir)
    return [epoch["mixing"]["labels"]["excess"] for epoch in plan_quality(spec, shuffle, epochs, labels)]


def predicted_q(out: Path, first: str, cell: dict, strategies: list[str], tolerance: float) -> dict:
    """`hpcshuffle tune-q --predict` for one (partition, workers) of the study, from the plan of its first
    run (seed 0's), with the study's candidate q: the answer to hold against the trained one."""
    run = runs_dir(out, first, cell["partition"], cell["workers"], strategies[0]) / "seed0"
    spec, _, epochs, labels = run_plan(run)
    candidates = [0.0 if s == "local" else float(s.removeprefix("partial-")) for s in strategies
                  if s == "local" or s.startswith("partial-")]
    return predict_q(replace(spec, seed=0, partition=cell["partition"]), epochs, labels, candidates, tolerance)


def with_label_skew(rows: list[dict], run_dirs: list[Path]) -> list[dict]:
    """`rows` (collect's, in `run_dirs` order) with each run's final label skew and its mean over the
    first quarter of the epochs, replayed from the plan; a run that recorded it must agree."""
    for row, run_dir in zip(rows, run_dirs):
        skew = replayed_label_skew(run_dir)
        if row.get("label_skew") is not None and abs(row["label_skew"] - skew[-1]) > 1e-6:
            raise RuntimeError(f"{run_dir}: recorded label skew {row['label_skew']} but its plan gives {skew[-1]}")
        row["label_skew"] = skew[-1]
        row["label_skew_early"] = round(statistics.fmean(skew[: max(1, len(skew) // 4)]), 6)
    return rows


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
    main_study.setdefault("variants", {})[variant] = {key: result[key] for key in ("rows", "cells", "runs",
                                                                                  "quality_vs_gap")}
    path.write_text(json.dumps(main_study, indent=1) + "\n")
    print(f"filed as {variant} under {path}'s variants")


def figures_of(result: dict, rows: list[dict], args, figures: Path) -> None:
    out, kind = Path(args.out), "virtual workers"
    for partition in args.partitions:
        for workers in args.workers:
            curves, bands = {}, {}
            for strategy in args.strategies:
                cell = runs_dir(out, args.partitions[0], partition, workers, strategy)
                curves[label(strategy)], bands[label(strategy)] = epoch_bands(cell, strategy, args.seeds)
            plot_curves(curves, "validation top-1 (%)", figures / f"accuracy_{partition}_M{workers}.png",
                        title=f"{partition}, M = {workers} {kind}: mean, 95 % band, {args.seeds} seeds",
                        bands=bands)
        scaling, scaling_bands = {}, {}
        for strategy in args.strategies:
            mine = [r for r in result["rows"] if r["partition"] == partition and _strategy_of(r) == strategy]
            scaling[label(strategy)] = {r["workers"]: r["top1_mean"] for r in mine}
            scaling_bands[label(strategy)] = {r["workers"]: tuple(r["ci95"]) for r in mine}
        plot_curves(scaling, "final validation top-1 (%)", figures / f"accuracy_vs_workers_{partition}.png",
                    xlabel=f"workers M ({kind})", log_x=True, bands=scaling_bands,
                    title=f"{partition} partition: final accuracy against workers (95 % intervals)")
        recovery, recovery_bands = {}, {}
        for workers in args.workers:
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
        groups = {p: [(x, y) for x, y, part in found_pairs if part == p] for p in args.partitions}
        plot_scatter(groups, xlabel, "top-1 minus global's mean (points)", figures / name,
                     title=f"{measure} vs gap to global: Pearson r = {corr['pearson_r']}, {len(found_pairs)} runs")


def prediction_lines(result: dict) -> str:
    """Per cell, q from the plan alone (tune-q --predict) beside q from training."""
    lines = [f"q without training (tune-q --predict, label skew at the last epoch within {SKEW_TOLERANCE} of "
             "global's) against the trained answer (the smallest q whose 95 % interval reaches global's)"]
    for cell in result["cells"]:
        predicted, trained = (("none" if q is None else f"{q:g}")
                              for q in (cell["predicted_q"], cell["smallest_q_reaching_global"]))
        lines.append(f"{cell['partition']} M={cell['workers']}: predicted q={predicted}, trained q={trained}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 64], metavar="M")
    parser.add_argument("--partitions", nargs="+", default=["random", "contiguous"], choices=["random", "contiguous"])
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per point, 0..SEEDS-1 (at least 2)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="synthetic",
                        help="synthetic (default): 4,096 images of 20 close classes; digits: real handwritten digits")
    parser.add_argument("--jobs", type=int, default=2, help="cells trained at a time (default: 2)")
    parser.add_argument("--out", default="results/experiments/accuracy_study", help="run directories go here")
    parser.add_argument("--json", default=None, help="default: <out>.json")
    parser.add_argument("--figures", default=None, help="figures and tables (default: <out>/figures)")
    parser.add_argument("--into", default=None, metavar="JSON",
                        help="also file this study under JSON's `variants`, as <dataset>/<norm> (a variant of a "
                             "main study: another dataset or model.norm)")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides for every run, after the study's defaults (a later one wins)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error(f"--seeds {args.seeds}: a 95 % interval needs at least 2 seeds per point; use --seeds 3")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    for strategy in args.strategies:
        if "=" in strategy:  # `--strategies global local batch_size=4` reads the override as a strategy
            parser.error(f"--strategies {strategy}: a Hydra override, not a strategy; put overrides after an "
                         "option that takes one value (e.g. after --out DIR) or after --")
        strategy_overrides(strategy)  # fail on a typo before hours of training
    # one spelling per q (partial-1.0 is partial-1), so run directories and figures agree
    args.strategies = [_strategy_of({"strategy": "partial", "q": float(s.removeprefix("partial-"))})
                       if s.startswith("partial-") else s for s in args.strategies]
    out = Path(args.out)
    figures = Path(args.figures) if args.figures else out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    overrides = [*DATASETS[args.dataset], *DEFAULT_OVERRIDES, *args.overrides]

    first = args.partitions[0]
    cells = list(dict.fromkeys((p if has_partition(s) else first, m, s)
                               for p in args.partitions for m in args.workers for s in args.strategies))
    print(f"accuracy study: {len(cells)} cells × {args.seeds} seeds, {args.epochs} epochs, {args.jobs} at a time "
          f"-> {out}", flush=True)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_cell, out, p, m, s, args.seeds, args.epochs, overrides) for p, m, s in cells]
        for done, future in enumerate(futures, 1):
            try:
                print(f"[{done}/{len(cells)}] {future.result()}", flush=True)
            except RuntimeError as err:
                sys.exit(str(err))
    print(f"trained in {time.perf_counter() - start:.0f} s", flush=True)

    wanted = {cell_dir(out, p, m, s) / f"seed{seed}" for p, m, s in cells for seed in range(args.seeds)}
    run_dirs = [run for run in find_runs(out) if run in wanted]
    rows = with_label_skew(collect(run_dirs), run_dirs)
    rows += [{**row, "partition": partition} for row in rows if not has_partition(row["shuffle"])
             for partition in args.partitions[1:]]  # the same runs stand for the other partitions' cells
    result = summary(rows)
    result["runs"] = runs_of(rows, result)
    for cell in result["cells"]:
        found = predicted_q(out, first, cell, args.strategies, SKEW_TOLERANCE)
        cell["predicted_q"], cell["predicted_skew"] = found["q"], {f"{q:g}": v for q, v in found["skew"].items()}
    variant = stamp(result, args.dataset, norm_of(rows))
    json_path = Path(args.json) if args.json else out.with_suffix(".json")
    write_study(json_path, result)
    if args.into:
        file_variant(Path(args.into), variant, result)
    figures_of(result, rows, args, figures)
    text = "\n\n".join([
        f"accuracy study: final validation top-1 % after {args.epochs} epochs, mean and 95 % interval over "
        f"{args.seeds} seeds (M virtual workers)",
        study_table(result), tune_table(tune_q(rows, 1.0)), prediction_lines(result),
    ])
    print(text)
    (figures / "accuracy_study.txt").write_text(text + "\n")
    print(f"wrote {json_path} and the figures under {figures}")


if __name__ == "__main__":
    main()
