"""The `hpcshuffle` command: plan, synth, stage, train, simulate, report, tune-q, imbalance, model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hpcshuffle.analysis.imbalance import BATCHES_PER_EPOCH
from hpcshuffle.analysis.imbalance import DEFAULT_STEPS as IMBALANCE_STEPS
from hpcshuffle.analysis.model import IMAGENET_PFS
from hpcshuffle.plan import STRATEGIES, EpochPlan, PlanSpec, get_strategy, plan_epochs
from hpcshuffle.store import StoreError


def plan_summary(plans: list[EpochPlan]) -> str:
    spec = plans[0].spec
    lines = [
        f"N={spec.num_samples} samples, M={spec.num_ranks} workers, b={spec.batch_size}, q={spec.q}, "
        f"seed={spec.seed}: {spec.iterations} iterations/epoch, every rank trains on {spec.max_share} "
        f"samples/epoch; partitions {spec.min_share}..{spec.max_share}",
        f"{'epoch':>5} {'held min..max':>14} {'sent/rank':>12} {'recv/rank':>12} {'peak/rank':>10} "
        f"{'bound':>6} {'shared reads':>13}",
    ]
    for plan in plans:
        held = [len(ids) for ids in plan.held]
        sent, received, peak = plan.sent_counts(), plan.received_counts(), plan.store_peak()
        lines.append(
            f"{plan.epoch:>5} {f'{min(held)}..{max(held)}':>14} {f'{min(sent)}..{max(sent)}':>12} "
            f"{f'{min(received)}..{max(received)}':>12} {max(peak):>10} {spec.storage_bound():>6} "
            f"{sum(plan.reads_shared):>13}"
        )
    return "\n".join(lines)


def plan_json(plans: list[EpochPlan]) -> str:
    def ids(arrays: list[np.ndarray]) -> list[list[int]]:
        return [array.tolist() for array in arrays]

    epochs = [
        {
            "epoch": plan.epoch,
            "held": ids(plan.held),
            "order": ids(plan.order),
            "sent": plan.sent_counts(),
            "received": plan.received_counts(),
            "store_peak": plan.store_peak(),
            "reads_shared": plan.reads_shared,
        }
        for plan in plans
    ]
    return json.dumps({"epochs": epochs})


def cmd_plan(args: argparse.Namespace) -> None:
    q = get_strategy(args.shuffle).q_for(args.q)
    spec = PlanSpec(args.samples, args.workers, args.batch, q, args.seed)
    plans = list(plan_epochs(spec, args.shuffle, args.epochs))
    print(plan_json(plans) if args.json else plan_summary(plans))


# `hpcshuffle synth` subcommand -> (registered format, the flags that make up its spec, what it writes)
SYNTH = {
    "imagefolder": ("imagefolder", ("samples", "classes", "val_samples", "size"), "images"),
    "cifar": ("cifar100", ("samples", "val_samples", "classes", "layout"), "records"),
    "deepcam": ("deepcam", ("samples", "val_samples", "height", "width"), "samples"),
}


def cmd_synth(args: argparse.Namespace) -> None:
    from hpcshuffle.formats import get_format

    name, flags, unit = SYNTH[args.format]
    dataset_format = get_format(name)
    spec = {flag: getattr(args, flag) for flag in flags}
    root = dataset_format.synthesize(args.out, seed=args.seed, progress=True, **spec)
    train, val = (dataset_format.scan(root, split) for split in dataset_format.splits)
    classes = f" in {len(train.classes)} classes" if train.classes else ""
    print(
        f"wrote {len(train)} training {unit}{classes} to {train.root} "
        f"({dataset_format.splits[0]}; {len(val)} in {dataset_format.splits[1]})"
    )


def parse_ranks(text: str | None, workers: int) -> list[int]:
    """'3' or '0-7' (inclusive) → rank list; None → all ranks."""
    if text is None:
        return list(range(workers))
    first, _, last = text.partition("-")
    ranks = list(range(int(first), int(last or first) + 1))
    if not ranks or ranks[0] < 0 or ranks[-1] >= workers:
        raise ValueError(f"--ranks {text} is outside 0-{workers - 1}")
    return ranks


def cmd_stage(args: argparse.Namespace) -> None:
    """Stage each rank's epoch-0 partition (global: its share of a node replica).

    One rank per MPI process, or several ranks of one node from a single process.
    """
    from hpcshuffle.formats import get_format
    from hpcshuffle.stage import (
        assess, byte_progress, check_capacity, demand, execute, replica_ids, stage_rank, summary,
    )
    from hpcshuffle.store import Store, rank_dir
    from hpcshuffle.world import discover, on_root

    # room for the exchange's (1+q)·N/M peak only matters when samples move
    q = args.q if args.shuffle == "partial" and args.q is not None else 0.0
    dataset_format = get_format(args.format)
    split = args.split or dataset_format.splits[0]
    world = discover()
    catalog = on_root(world, lambda: dataset_format.scan(Path(args.src), split), ValueError, OSError)
    spec = PlanSpec(len(catalog), args.workers, batch_size=1, q=q, seed=args.seed)
    held = next(plan_epochs(spec, args.shuffle, 1)).held

    def target(rank: int, local_rank: int, local_size: int):
        if args.shuffle == "global":
            return replica_ids(spec.num_samples, local_rank, local_size)
        return held[rank]
    max_bytes = None if args.max_gib is None else int(args.max_gib * 2**30)
    plan_key = f"staged:{catalog.fingerprint()}:{args.workers}:{args.seed}"
    progress = sys.stderr.isatty()
    if world.size > 1:
        if world.size != args.workers:
            raise ValueError(f"--workers {args.workers} but this job has {world.size} MPI ranks; they must match")
        with Store(rank_dir(args.dst, world.rank)) as store:
            stage_rank(world, store, target(world.rank, world.local_rank, world.local_size), catalog, q=q,
                       threads=args.threads, max_bytes=max_bytes, progress=progress)
            store.commit(0, plan_key)
        return
    ranks = parse_ranks(args.ranks, args.workers)
    stores = [Store(rank_dir(args.dst, rank)) for rank in ranks]
    try:
        # the ranks staged here are taken to be one node's, in local-rank order
        works = [
            assess(store, target(rank, index, len(ranks)), catalog, args.threads)
            for index, (rank, store) in enumerate(zip(ranks, stores))
        ]
        check_capacity(Path(args.dst), [demand(world.hostname, s, w, q) for s, w in zip(stores, works)], q, max_bytes)
        reports = []
        with byte_progress(sum(w.copy_bytes for w in works), progress) as bar:
            for store, work in zip(stores, works):
                reports.append(execute(store, work, catalog, args.threads, on_bytes=bar.update))
                store.commit(0, plan_key)
        changed = [catalog.relpaths[i] for work in works for i in work.changed[:3]]
        print(summary(reports, changed, Path(args.dst)))
    finally:
        for store in stores:
            store.close()


def expand_runs(paths: list[str]) -> list[Path]:
    """Run directories as given; a directory without a metrics.jsonl of its own stands for the runs under it."""
    from hpcshuffle.report import find_runs

    run_dirs = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(
                f"{path} does not exist or is not a directory; pass a run directory or a directory of runs"
            )
        if (path / "metrics.jsonl").exists():
            run_dirs.append(path)
            continue
        found = find_runs(path)
        if not found:
            raise FileNotFoundError(
                f"no run directories under {path} (none holds a metrics.jsonl); pass the directory a run, "
                "sweep or job array wrote, e.g. results/sweeps/<time>"
            )
        run_dirs.extend(found)
    return run_dirs


def write_csv(rows: list[dict], path: Path) -> None:
    from hpcshuffle.report import write_summary_csv

    try:
        write_summary_csv(rows, path)
    except OSError as err:
        raise ValueError(f"cannot write {path} ({err.strerror}); pass --csv with a writable path") from err


def cmd_report(args: argparse.Namespace) -> None:
    from hpcshuffle.metrics import read_jsonl
    from hpcshuffle.report import breakdown_table, collect, curve_tables, write_plots

    run_dirs = expand_runs(args.run_dirs)
    named = {Path(d) for d in args.run_dirs}
    # a run found under a directory that has not finished an epoch yet is left out, not an error
    started = [d for d in run_dirs if d in named or read_jsonl(d / "metrics.jsonl", partial_last=True)]
    for run_dir in sorted(set(run_dirs) - set(started)):
        print(f"hpcshuffle report: {run_dir} has no epochs yet; left out", file=sys.stderr)
    if not started:
        raise ValueError("none of the runs has finished an epoch yet")
    # figures first: a --plot that cannot be written fails before any table is printed
    plots = write_plots(started, Path(args.plot)) if args.plot else []
    print(breakdown_table(started))
    print()
    print(curve_tables(started))
    for path in plots:
        print(f"wrote {path}")
    if args.csv:
        write_csv(collect(started), Path(args.csv))
        print(f"wrote {args.csv} ({len(started)} runs)")


def cmd_tune_q(args: argparse.Namespace) -> None:
    from hpcshuffle.report import collect
    from hpcshuffle.tune import tune_q, tune_table

    results_dir = Path(args.results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(
            f"{results_dir} does not exist or is not a directory; pass the directory a sweep or job array "
            "wrote, e.g. results/sweeps/<time>"
        )
    rows = collect(expand_runs([args.results_dir]))
    result = tune_q(rows, args.tolerance, args.reference, args.include_incomplete)
    csv_path = Path(args.csv) if args.csv else results_dir / "summary.csv"
    write_csv(rows, csv_path)
    print(tune_table(result))
    print(f"wrote {csv_path} ({len(rows)} runs)")


def cmd_imbalance(args: argparse.Namespace) -> None:
    from hpcshuffle.analysis.imbalance import imbalance_json, imbalance_table, sweep

    results = sweep(args.batch, args.nodes, args.steps, args.seed)
    if args.plot:
        from hpcshuffle.analysis.plots import plot_imbalance

        plot_imbalance(results, Path(args.plot))
    render = imbalance_json if args.json else imbalance_table
    print(render(results, args.steps, args.seed))
    if args.plot and not args.json:
        print(f"wrote {args.plot}")


def cmd_model(args: argparse.Namespace) -> None:
    from hpcshuffle.analysis.model import ModelParams, model_json, model_table, predict

    params = ModelParams(
        num_samples=args.samples,
        train_samples_per_s=args.train_rate,
        io_samples_per_s=args.io_rate,
        preprocess_samples_per_s=args.preprocess_rate,
        cached_fraction=args.alpha,
        cache_samples_per_s=args.cache_rate,
        balance_samples_per_s=args.balance_rate,
        balance_fraction=args.beta,
    )
    predictions = predict(params, args.nodes, args.batch, args.seed)
    if args.plot:
        from hpcshuffle.analysis.plots import plot_model

        plot_model(params, predictions, Path(args.plot))
    render = model_json if args.json else model_table
    print(render(params, predictions, args.batch))
    if args.plot and not args.json:
        print(f"wrote {args.plot}")


def simulate_argv(argv: list[str]) -> list[str]:
    """`simulate M overrides...` as the training run's arguments: M virtual workers in one process."""
    workers = argv[0] if argv else ""
    if not workers.isdigit() or int(workers) < 1:
        raise ValueError(
            f"`hpcshuffle simulate M [hydra overrides]`: M, the number of virtual workers, must be a positive "
            f"integer, got {workers!r}; e.g. `hpcshuffle simulate 64 shuffle=partial shuffle.q=0.1`"
        )
    return [f"shuffle.virtual_workers={int(workers)}", *argv[1:]]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["train"], ["simulate"]):
        from hpcshuffle import train

        overrides = argv[1:]
        if argv[0] == "simulate" and argv[1:2] not in (["-h"], ["--help"]):
            try:
                overrides = simulate_argv(argv[1:])
            except ValueError as err:
                print(f"hpcshuffle simulate: error: {err}", file=sys.stderr)
                sys.exit(2)
        sys.argv = [f"hpcshuffle {argv[0]}", *overrides]
        train.main()
        return
    from hpcshuffle.formats import FORMATS

    parser = argparse.ArgumentParser(prog="hpcshuffle", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    plan = commands.add_parser("plan", help="dry-run a shuffling plan: partitions, exchanges, storage")
    plan.add_argument("--samples", type=int, required=True, help="N, training samples")
    plan.add_argument("--workers", type=int, required=True, help="M, ranks")
    plan.add_argument("--shuffle", choices=sorted(STRATEGIES), required=True)
    plan.add_argument("--q", type=float, default=None, help="fraction exchanged per epoch (partial)")
    plan.add_argument("--batch", type=int, default=32, help="b, samples per rank per iteration")
    plan.add_argument("--epochs", type=int, default=3)
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--json", action="store_true", help="per epoch and rank: ids held and order")
    plan.set_defaults(run=cmd_plan)

    synth = commands.add_parser("synth", help="write a synthetic dataset in a real format")
    formats = synth.add_subparsers(dest="format", required=True)
    imagefolder = formats.add_parser("imagefolder", help="JPEGs in <out>/{train,val}/<class>/")
    imagefolder.add_argument("--out", required=True)
    imagefolder.add_argument("--samples", type=int, required=True, help="training images")
    imagefolder.add_argument("--classes", type=int, default=10)
    imagefolder.add_argument("--val-samples", type=int, default=None, help="default: samples/5")
    imagefolder.add_argument("--size", type=int, default=32, help="image side in pixels")
    imagefolder.add_argument("--seed", type=int, default=0)
    imagefolder.set_defaults(run=cmd_synth)
    cifar = formats.add_parser(
        "cifar", aliases=["cifar100"], help="CIFAR-100 containers in <out>/cifar-100-{python,binary}/"
    )
    cifar.add_argument("--out", required=True)
    cifar.add_argument("--samples", type=int, required=True, help="training records")
    cifar.add_argument("--val-samples", type=int, default=None, help="test records; default: samples/5")
    cifar.add_argument("--classes", type=int, default=100)
    cifar.add_argument("--layout", choices=["python", "binary"], default="python")
    cifar.add_argument("--seed", type=int, default=0)
    cifar.set_defaults(run=cmd_synth, format="cifar")
    deepcam = formats.add_parser("deepcam", help="HDF5 files in <out>/{train,validation}/ and <out>/stats.h5")
    deepcam.add_argument("--out", required=True)
    deepcam.add_argument("--samples", type=int, required=True, help="training files")
    deepcam.add_argument("--val-samples", type=int, default=None, help="validation files; default: samples/5")
    deepcam.add_argument("--height", type=int, default=768, help="a multiple of 16")
    deepcam.add_argument("--width", type=int, default=1152, help="a multiple of 16")
    deepcam.add_argument("--seed", type=int, default=0)
    deepcam.set_defaults(run=cmd_synth)

    stage = commands.add_parser(
        "stage",
        help="copy each rank's partition from shared storage into node-local stores",
        description="Under srun/mpiexec every MPI rank stages its own store (ranks must equal "
        "--workers); as a single process it stages --ranks (default: all) itself.",
    )
    stage.add_argument("--src", required=True, help="dataset root on shared storage")
    stage.add_argument("--dst", required=True, help="node-local directory (storage.local_dir)")
    stage.add_argument("--shuffle", choices=sorted(STRATEGIES), required=True)
    stage.add_argument("--workers", type=int, required=True, help="M, ranks of the training job")
    stage.add_argument("--q", type=float, default=None, help="exchange fraction (room is reserved for it)")
    stage.add_argument("--seed", type=int, default=0, help="the training run's seed")
    stage.add_argument("--format", choices=sorted(FORMATS), default="imagefolder")
    stage.add_argument("--split", default=None, help="default: the format's training split")
    stage.add_argument("--threads", type=int, default=8, help="parallel copies per rank")
    stage.add_argument("--max-gib", type=float, default=None, help="cap on the space used per node")
    stage.add_argument("--ranks", default=None, help="single process: ranks to stage, e.g. 0-3")
    stage.set_defaults(run=cmd_stage)

    commands.add_parser("train", help="train: `hpcshuffle train <hydra overrides>` (see conf/)")
    commands.add_parser("simulate", help="train M virtual workers in one process: `hpcshuffle simulate M "
                                         "<hydra overrides>` (= train shuffle.virtual_workers=M)")

    report = commands.add_parser(
        "report",
        help="breakdown table and validation curves across run directories",
        description="Seconds per epoch in each phase per run (Fig. 10), then the validation score per epoch "
        "per run (Fig. 5), and the shuffle quality per epoch where runs record it (mixing.quality).",
    )
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run directory, or a directory of runs")
    report.add_argument("--csv", default=None, metavar="PATH", help="also write one summary row per run here")
    report.add_argument("--plot", default=None, metavar="DIR",
                        help="also write breakdown.png, accuracy.png (and quality.png) into DIR")
    report.set_defaults(run=cmd_report)

    tune = commands.add_parser(
        "tune-q",
        help="recommend the smallest exchange fraction q that keeps accuracy (paper §III-D)",
        description="Per worker count, the smallest q among the local (q=0) and partial runs under "
        "RESULTS_DIR whose final validation score is within --tolerance of global shuffling's. "
        "Writes one row per run to RESULTS_DIR/summary.csv.",
    )
    tune.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep's or job array's output directory")
    tune.add_argument("--tolerance", type=float, default=1.0,
                      help="points of top-1 %% (or 100·IoU) a candidate may lose (default: 1.0)")
    tune.add_argument("--reference", choices=["auto", "global", "best"], default="auto",
                      help="compare with global shuffling, the best run, or global where there is one (default)")
    tune.add_argument("--include-incomplete", action="store_true",
                      help="count runs that stopped early, at their last epoch")
    tune.add_argument("--csv", default=None, metavar="PATH", help="default: RESULTS_DIR/summary.csv")
    tune.set_defaults(run=cmd_tune_q)

    imbalance = commands.add_parser(
        "imbalance",
        help="simulate how unevenly global batches fall into node caches (Yang & Cong 2019, Fig. 6)",
        description=f"Per (local batch b, nodes p): a dataset of {BATCHES_PER_EPOCH}·p·b samples evenly "
        "cached over p nodes; global batches of p·b are consecutive slices of one seeded permutation per "
        "epoch. Reports the imbalance (Σ deficits against b, as % of p·b) and the transfers Algorithm 1 "
        "needs per step.",
    )
    imbalance.add_argument("--batch", type=int, nargs="+", default=[32, 64, 128], metavar="B",
                           help="local batch sizes b (default: 32 64 128)")
    imbalance.add_argument("--nodes", type=int, nargs="+", default=[16, 64, 256], metavar="P",
                           help="node counts p (default: 16 64 256)")
    imbalance.add_argument("--steps", type=int, default=IMBALANCE_STEPS,
                           help="global batches simulated per (b, p) (default: %(default)s)")
    imbalance.add_argument("--seed", type=int, default=0)
    imbalance.add_argument("--json", action="store_true",
                           help='{"medians": [{"batch", "nodes", "imbalance_pct"}, ...], "boxes": [...], ...}')
    imbalance.add_argument("--plot", default=None, metavar="PNG", help="also write the box plot here")
    imbalance.set_defaults(run=cmd_imbalance)

    model = commands.add_parser(
        "model",
        help="predict epoch times of regular, distributed-cache and locality-aware loading (Yang & Cong eqs. 1-8)",
        description="Epoch time = max(training D/(p·V), sample I/O + preprocessing D/(p·U)). Sample I/O is "
        "D/R for regular loading, (1-α)·D/R + α·D/Rc·(p-1)/p with a distributed cache, and "
        "(1-α)·D/R + α·D/Rb·β for locality-aware loading. Defaults: ResNet-50 on ImageNet-1k read "
        "from a parallel file system by nodes of 4 V100-class GPUs. Rates count samples per second.",
    )
    model.add_argument("--samples", metavar="D", type=int, default=IMAGENET_PFS.num_samples,
                       help="D, samples in the dataset (default: %(default)s, ImageNet-1k)")
    model.add_argument("--train-rate", metavar="V", type=float, default=IMAGENET_PFS.train_samples_per_s,
                       help="V, samples/s one node trains on with data in memory (default: %(default)s)")
    model.add_argument("--io-rate", metavar="R", type=float, default=IMAGENET_PFS.io_samples_per_s,
                       help="R, samples/s the shared file system delivers to all nodes together (default: %(default)s)")
    model.add_argument("--preprocess-rate", metavar="U", type=float, default=IMAGENET_PFS.preprocess_samples_per_s,
                       help="U, samples/s one node decodes and augments (default: %(default)s)")
    model.add_argument("--alpha", metavar="ALPHA", type=float, default=IMAGENET_PFS.cached_fraction,
                       help="α, fraction of the dataset the nodes cache together, in [0, 1] (default: %(default)s)")
    model.add_argument("--cache-rate", metavar="RC", type=float, default=IMAGENET_PFS.cache_samples_per_s,
                       help="Rc, samples/s read from remote caches over the interconnect (default: %(default)s)")
    model.add_argument("--balance-rate", metavar="RB", type=float, default=None,
                       help="Rb, samples/s of load-balancing transfers (default: Rc)")
    model.add_argument("--beta", metavar="BETA", type=float, default=None,
                       help="β, fraction of the dataset moved per epoch for balancing (default: the median "
                       "simulated imbalance for --batch on each node count)")
    model.add_argument("--batch", type=int, default=32, metavar="B",
                       help="b, local batch per node, for simulating β (default: %(default)s)")
    model.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256], metavar="P",
                       help="node counts p (default: 1 2 4 ... 256)")
    model.add_argument("--seed", type=int, default=0, help="seed of the β simulation")
    model.add_argument("--json", action="store_true", help="parameters and per node count every method's times")
    model.add_argument("--plot", default=None, metavar="PNG", help="also write epoch time vs nodes here")
    model.set_defaults(run=cmd_model)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ValueError, FileNotFoundError, StoreError) as err:
        parser.exit(2, f"hpcshuffle {args.command}: error: {err}\n")


if __name__ == "__main__":
    main()
