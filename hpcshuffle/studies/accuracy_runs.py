"""The accuracy study's runs (experiments/accuracy_study.py): where each (partition, M, strategy) cell's
seeds lie, training a cell's missing seeds as one Hydra multirun (complete seeds are reused), and each
run's plan replayed from its config: its training labels, its label skew per epoch, and the q that
`hpcshuffle tune-q --predict` would choose for it."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hpcshuffle.analysis.labels import balanced_labels, plan_quality, predict_q
from hpcshuffle.formats import digits, get_format
from hpcshuffle.plan import PlanSpec, get_strategy
from hpcshuffle.studies.runs import (
    REPO,
    launch_environment,
    records,
    strategy_overrides,
)
from hpcshuffle.train import CONFIG_DIR


def label(strategy: str) -> str:
    """A strategy as the figures name it: partial-0.1 as `partial q=0.1`."""
    return strategy.replace("partial-", "partial q=")


def strategy_of(row: dict) -> str:
    """A study row's strategy as the command line names it (partial-<q>)."""
    return f"partial-{row['q']:g}" if row["strategy"] == "partial" else row["strategy"]


def cell_dir(out: Path, partition: str, workers: int, strategy: str) -> Path:
    """The directory of a cell's runs, one `seed<N>` under it per seed."""
    return out / partition / f"M{workers}" / strategy


def has_partition(strategy: str) -> bool:
    """Whether a strategy's plan reads storage.partition; one that reads shared storage (global) has no
    partition, so the study trains its runs once, under the first partition, for every partition's cell."""
    return get_strategy(strategy.split("-")[0]).node_scope


def runs_cell(first: str, partition: str, workers: int, strategy: str) -> tuple[str, int, str]:
    """The (partition, M, strategy) whose runs a cell reads: its own, or the first partition's where the
    strategy has none."""
    return partition if has_partition(strategy) else first, workers, strategy


def runs_dir(out: Path, first: str, partition: str, workers: int, strategy: str) -> Path:
    """Where the runs of a cell lie (`runs_cell`'s directory)."""
    return cell_dir(out, *runs_cell(first, partition, workers, strategy))


WIDE = 2.0  # points: a cell whose paired gap's 90 % interval is wider gets more seeds (--seeds-where-wide)


def wide_cells(gaps: list[dict], first: str, width: float = WIDE) -> list[tuple[str, int, str]]:
    """The cells to give more seeds: (the partition its runs lie under, M, strategy) of every gap whose
    90 % interval (the one the reach rule reads) is wider than `width` points, each with global
    shuffling at its M, since a gap pairs the two seed by seed."""
    found = []
    for gap in gaps:
        low, high = gap["ci90"]
        if high - low > width:
            found += [runs_cell(first, gap["partition"], gap["workers"], strategy_of(gap)),
                      (first, gap["workers"], "global")]
    return list(dict.fromkeys(found))


def trained_seeds(out: Path, cells: list[tuple[str, int, str]], counts: list[int],
                  epochs: int) -> tuple[dict[tuple, int], list[tuple]]:
    """Without touching a run (a study may be training them): per cell, the largest of `counts` whose
    seeds 0..N-1 all hold `epochs` epochs, and the cells with fewer than the smallest of them."""
    found, short = {}, []
    for cell in cells:
        complete = 0  # seeds 0..complete-1 hold every epoch
        while complete < max(counts) and len(records(cell_dir(out, *cell) / f"seed{complete}")) >= epochs:
            complete += 1
        enough = [n for n in counts if n <= complete]
        if enough:
            found[cell] = max(enough)
        else:
            short.append(cell)
    return found, short


def filed_whole(first: str, partitions: list[str], workers_each: list[int], strategies: list[str],
                seeds: dict[tuple, int]) -> tuple[dict[tuple, int], set[tuple], dict[tuple, list[str]]]:
    """What `--collect-only` files: a (partition, M) whole or not at all, since with one strategy still
    short of its seeds the smallest q reaching GS and the pre-registered hits would read it as failing.
    (the run cells' seeds kept, the (partition, M) filed, per (partition, M) left out with some strategy
    trained: those strategies)."""
    keys = [(p, m) for p in partitions for m in workers_each]
    filed = {key for key in keys if all(runs_cell(first, *key, s) in seeds for s in strategies)}
    partly = {key: trained for key in keys if key not in filed
              if (trained := [s for s in strategies if runs_cell(first, *key, s) in seeds])}
    kept = {cell: n for cell, n in seeds.items() if any(runs_cell(first, *key, cell[2]) == cell for key in filed)}
    return kept, filed, partly


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
    env = launch_environment()
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the multirun of {cell} failed (exit {result.returncode}):\n"
                           f"{result.stdout[-2000:]}{result.stderr[-3000:]}")
    return f"  {cell}: seeds {todo} trained in {time.perf_counter() - start:.0f} s"


def training_labels(dataset: dict, samples: int | None = None):
    """The training labels in listing order of a run's dataset, from its config alone where it can (no
    image read): the synthetic ImageFolder lists its C balanced classes class by class, digits' split is
    a function of its seed; any other dataset is listed. With `samples`, a run's, they must agree."""
    spec = dataset["synthesize"]
    if dataset["format"] == "digits":
        labels = digits.train_labels(spec["val_fraction"], spec["seed"])
    elif dataset["format"] == "imagefolder" and spec:
        labels = balanced_labels(samples or spec["samples"], spec["classes"])
    else:
        dataset_format = get_format(dataset["format"])
        labels = dataset_format.scan(Path(dataset["root"]), dataset_format.splits[0]).labels
    if samples is not None and len(labels) != samples:
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
                    first["ranks_per_node"], first["partition"], first["shard_samples"], first["shuffle_buffer"], labels)
    return spec, first["shuffle"], len(run), labels


def replayed_label_skew(run_dir: Path) -> list[float]:
    """The label skew (mixing.labels.excess) of each epoch of a run, replayed from its plan, so runs
    trained before label skew was recorded get it too."""
    spec, shuffle, epochs, labels = run_plan(run_dir)
    return [epoch["mixing"]["labels"]["excess"] for epoch in plan_quality(spec, shuffle, epochs, labels)]


def candidate_qs(strategies: list[str]) -> dict[str, float]:
    """{strategy: its q} for the study's strategies on the q axis: local is q = 0, partial-<q> is q."""
    return {s: 0.0 if s == "local" else float(s.removeprefix("partial-")) for s in strategies
            if s == "local" or s.startswith("partial-")}


def predicted_q(out: Path, first: str, cell: dict, strategies: list[str], tolerance: float) -> dict:
    """`hpcshuffle tune-q --predict` for one (partition, workers) of the study, from the plan of its first
    run (seed 0's), with the study's candidate q: the answer to hold against the trained one."""
    run = runs_dir(out, first, cell["partition"], cell["workers"], strategies[0]) / "seed0"
    spec, _, epochs, labels = run_plan(run)
    candidates = list(candidate_qs(strategies).values())
    return predict_q(replace(spec, seed=0, partition=cell["partition"]), epochs, labels, candidates, tolerance)


def composed(overrides: list[str]) -> dict:
    """The config `python -m hpcshuffle.train` composes from `overrides`, as plain data."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)


def preregistered(overrides: list[str], partition: str, workers: int, epochs: int, strategies: list[str],
                  tolerance: float) -> dict:
    """What the plan alone says of a cell before any of it is trained: `tune-q --predict`'s q (seed 0's plan,
    the study's candidates) and the strategies ranked by their planned final label skew, least first
    (the measure's predicted order of accuracy, global shuffling among them)."""
    config = composed([*overrides, f"storage.partition={partition}", f"shuffle.virtual_workers={workers}"])
    labels = training_labels(config["dataset"])
    spec = PlanSpec(len(labels), workers, config["batch_size"], 0.0, 0, partition=partition, labels=tuple(labels))
    candidates = candidate_qs(strategies)
    found = predict_q(spec, epochs, labels, list(candidates.values()), tolerance)
    skew = {"global": found["global"], **{s: found["skew"][q] for s, q in candidates.items()}}
    return {"partition": partition, "workers": workers, "batch_size": config["batch_size"], "predicted_q": found["q"],
            "skew": skew, "predicted_order": sorted(skew, key=skew.get)}


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


def study_setup(dataset: str, partitions: list[str], workers_each: list[int], epochs: int, seeds: int,
                rows: list[dict], run: Path) -> dict:
    """What a study trained, for its readers (the study JSON's `setup`): the data, the partitions in the
    order asked, the model, epochs, seeds and the batch per M; `run` is any of its runs."""
    labels = run_plan(run)[3]
    return {"dataset": dataset, "partitions": partitions, "samples": len(labels),
            "classes": len(set(map(int, labels))), "model": rows[0]["model"], "epochs": epochs, "seeds": seeds,
            "batch_size": {str(m): next(r["batch_size"] for r in rows if r["workers"] == m) for m in workers_each}}


def untrained_cells(partitions: list[str], batches: dict[int, list[str]], trained: Callable[[str, int], bool],
                    predict: Callable[[str, int, list[str]], dict],
                    said: Callable[[dict], str]) -> tuple[list[dict], list[str]]:
    """(predictions, cells left out): `predict(partition, M, batch override)` for every (partition, M) of a
    study that `trained(partition, M)` says has no runs yet, each printed as `said` words it; a cell with
    runs is left out and named, since predicting it now would be hindsight."""
    cells, skipped = [], []
    for partition in partitions:
        for workers, batch in batches.items():
            if trained(partition, workers):
                skipped.append(f"{partition} M={workers}")
                continue
            cells.append(predict(partition, workers, batch))
            print(f"{partition} M={workers}: {said(cells[-1])}", flush=True)
    if skipped:
        print(f"not pre-registered, they have runs already: {', '.join(skipped)}")
    return cells, skipped


def write_registration(path: Path, record: dict) -> None:
    """A pre-registration file: `record` after when, from which commit and by which command it was made."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"made": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit, "command": sys.argv,
                                **record}, indent=1) + "\n")


def write_preregistration(path: Path, out: Path, dataset: str, partitions: list[str], batches: dict[int, list[str]],
                          strategies: list[str], epochs: int, seeds: int, overrides: list[str],
                          tolerance: float) -> None:
    """`accuracy_study.py --preregister`: the plans' predictions (`preregistered`) for every (partition, M)
    of the study under `out` whose cells have no runs yet, written to `path` with the commit and command
    that made them; `batches[M]`: the batch override at M. A cell with runs is left out and named."""
    held = [s for s in strategies if has_partition(s)]
    cells, skipped = untrained_cells(
        partitions, batches, lambda partition, workers: any(cell_dir(out, partition, workers, s).exists() for s in held),
        lambda partition, workers, batch: preregistered([*overrides, *batch], partition, workers, epochs, strategies,
                                                        tolerance),
        lambda cell: f"q={cell['predicted_q']}, order {' > '.join(cell['predicted_order'])}")
    write_registration(path, {
        "dataset": dataset, "overrides": overrides, "epochs": epochs, "seeds": seeds,
        "rule": f"q: the smallest candidate whose planned label skew at the last epoch (seed 0's plan) is within "
                f"{tolerance} of global shuffling's (tune-q --predict); order: the strategies by that skew, "
                "least first, read as best accuracy first; two strategies whose skews differ by less than "
                f"{tolerance} are predicted tied, so that pair is claimed neither way",
        "cells": cells, "skipped_as_trained": skipped})
    print(f"wrote {path}: commit it before training these cells")

