"""`hpcshuffle plan`: dry-run a shuffling plan and print its partitions, exchanges and storage."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from hpcshuffle.analysis.labels import balanced_labels, labels_from_counts, plan_quality
from hpcshuffle.errors import ConfigError
from hpcshuffle.plan import (
    STRATEGIES,
    EpochPlan,
    PlanSpec,
    check_partition,
    get_strategy,
    plan_epochs,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle plan` to `commands`."""
    plan = commands.add_parser("plan", help="dry-run a shuffling plan: partitions, exchanges, storage")
    plan.add_argument("--samples", type=int, default=None, help="N, training samples (required unless --dataset)")
    plan.add_argument("--workers", type=int, required=True, help="M, ranks")
    plan.add_argument("--shuffle", choices=sorted(STRATEGIES), required=True)
    plan.add_argument("--q", type=float, default=None, help="fraction exchanged per epoch (partial)")
    plan.add_argument("--batch", type=int, default=32, help="b, samples per rank per iteration")
    plan.add_argument("--epochs", type=int, default=3)
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--ranks-per-node", type=int, default=1, metavar="R",
                      help="ranks sharing a node's partition (storage.scope=node); 1: rank scope")
    plan.add_argument("--partition", type=partition_arg, default="random",
                      help="how the first partition is cut (storage.partition): random (default), contiguous, "
                           "dirichlet-α or classes_per_worker-k, which need the labels (--classes, --label-counts, "
                           "--dataset)")
    plan.add_argument("--shard-samples", type=int, default=1, metavar="G",
                      help="partition and exchange whole shards of G samples (shuffle.unit=shard); 1: samples")
    plan.add_argument("--buffer", type=int, default=0, metavar="B",
                      help="read each node's shards through a shuffle buffer of B samples (shuffle.buffer); 0: full shuffle")
    plan.add_argument("--json", action="store_true", help="per epoch and rank: ids held and order")
    plan.add_argument("--quality", action="store_true",
                      help="per epoch: the shuffle quality instead (pair mixing, and label skew from --classes "
                           "or --label-counts); with --json as JSON")
    labels = plan.add_mutually_exclusive_group()
    labels.add_argument("--classes", type=int, default=None, metavar="C",
                        help="with --quality: C balanced classes, ids class by class as an ImageFolder lists them")
    labels.add_argument("--label-counts", default=None, metavar="FILE",
                        help="with --quality: a JSON list of per-class sample counts in class order (they sum to N)")
    labels.add_argument("--dataset", default=None, metavar="ROOT",
                        help="list the training split at ROOT for N and, with --quality, its labels")
    plan.add_argument("--format", default="imagefolder", metavar="F",
                      help="with --dataset: its layout, a dataset format name (default imagefolder)")
    plan.set_defaults(run=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> None:
    """Plan --epochs epochs of --shuffle and print the summary, the JSON, or with --quality the
    shuffle quality per epoch. ConfigError without N (--samples or --dataset) or when they differ."""
    q = get_strategy(args.shuffle).q_for(args.q)
    listed = dataset_labels(args.dataset, args.format, args.quality) if args.dataset else None
    if listed is not None:
        if args.samples not in (None, listed.size):
            raise ConfigError(f"--samples {args.samples} but --dataset {args.dataset} lists {listed.size} training "
                              "samples; drop --samples")
        args.samples = listed.size
    if args.samples is None:
        raise ConfigError("give N with --samples, or --dataset ROOT to list it")
    labels = listed if listed is not None else quality_labels(args)
    spec = PlanSpec(args.samples, args.workers, args.batch, q, args.seed, args.ranks_per_node, args.partition,
                    args.shard_samples, args.buffer, labels)
    if args.quality:
        quality = plan_quality(spec, args.shuffle, args.epochs, labels)
        print(json.dumps({"epochs": quality}) if args.json else quality_table(quality))
        return
    plans = list(plan_epochs(spec, args.shuffle, args.epochs))
    print(plan_json(plans) if args.json else plan_summary(plans))


def partition_arg(text: str) -> str:
    """--partition's value, checked (plan.check_partition) so a typo is refused with the choices."""
    try:
        return check_partition(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def dataset_labels(root: str, format_name: str, quality: bool) -> np.ndarray:
    """The training split's labels at `root`, in listing order (the sample ids a run gives them)."""
    from hpcshuffle.formats import get_format

    dataset_format = get_format(format_name)
    if quality and not dataset_format.class_labels:
        raise ConfigError(f"--dataset {root}: {format_name} samples carry their labels inside the files (per pixel), "
                          "not one class each, so a plan has no label skew to measure; for the pair mixing "
                          "alone give --samples N instead of --dataset")
    catalog = dataset_format.scan(Path(root), dataset_format.splits[0])
    return np.asarray(catalog.labels, dtype=np.int64)


def quality_labels(args: argparse.Namespace) -> np.ndarray | None:
    """The labels `--classes` or `--label-counts` give, checked against --samples; None without either."""
    if args.classes is not None:
        return balanced_labels(args.samples, args.classes)
    if args.label_counts is None:
        return None
    try:
        counts = json.loads(Path(args.label_counts).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--label-counts {args.label_counts}: cannot read a JSON list of counts ({err})") from err
    labels = labels_from_counts(counts)
    if labels.size != args.samples:
        raise ConfigError(f"--label-counts {args.label_counts} sums to {labels.size} samples, --samples is "
                          f"{args.samples}; give the same N to both")
    return labels


def quality_table(rows: list[dict]) -> str:
    """The per-epoch pair mixing, with the label skew columns where the rows have labels."""
    header = f"{'epoch':>5} {'mixing':>7}"
    labelled = "labels" in rows[0]["mixing"]
    if labelled:
        header += f" {'same_class':>10} {'global_batch':>12} {'excess':>7} {'partition_tv':>12} {'tv_max':>7}"
    lines = [header]
    for row in rows:
        line = f"{row['epoch']:>5} {row['mixing']['quality']:>7.3f}"
        if labelled:
            skew = row["mixing"]["labels"]
            line += (f" {skew['same_class']:>10.4f} {skew['global_batch']:>12.4f} {skew['excess']:>7.4f} "
                     f"{skew['partition_tv']:>12.4f} {skew['partition_tv_max']:>7.4f}")
        lines.append(line)
    if not labelled:
        lines.append("label skew: give the labels with --classes C or --label-counts FILE")
    return "\n".join(lines)


def plan_summary(plans: list[EpochPlan]) -> str:
    """The plans' shape, then per epoch the held, sent, received and peak counts per rank (per node
    in node scope) against the storage bound, and the reads from shared storage."""
    spec = plans[0].spec
    unit = "node" if spec.ranks_per_node > 1 else "rank"
    nodes = f", {spec.nodes} nodes of {spec.ranks_per_node} ranks sharing a partition" if unit == "node" else ""
    shards = f" of shards of {spec.shard_samples}" if spec.shard_samples > 1 else ""
    shards += f", a shuffle buffer of {spec.shuffle_buffer}" if spec.shuffle_buffer else ""
    lines = [
        f"N={spec.num_samples} samples, M={spec.num_ranks} workers{nodes}, b={spec.batch_size}, q={spec.q}, "
        f"seed={spec.seed}, {spec.partition} partition{shards}: "
        f"{spec.iterations} iterations/epoch, every rank trains on {spec.max_share} "
        f"samples/epoch; partitions {spec.num_samples // spec.nodes}..{-(-spec.num_samples // spec.nodes)}",
        f"{'epoch':>5} {'held min..max':>14} {f'sent/{unit}':>12} {f'recv/{unit}':>12} {f'peak/{unit}':>10} "
        f"{'bound':>6} {'shared reads':>13}",
    ]

    def per_unit(counts: list[int]) -> list[int]:
        return [sum(counts[rank] for rank in spec.node_ranks(node)) for node in range(spec.nodes)]

    for plan in plans:
        held = per_unit([len(ids) for ids in plan.held])
        sent, received = per_unit(plan.sent_counts()), per_unit(plan.received_counts())
        peak = per_unit(plan.store_peak())
        lines.append(
            f"{plan.epoch:>5} {f'{min(held)}..{max(held)}':>14} {f'{min(sent)}..{max(sent)}':>12} "
            f"{f'{min(received)}..{max(received)}':>12} {max(peak):>10} {spec.storage_bound():>6} "
            f"{sum(plan.reads_shared):>13}"
        )
    return "\n".join(lines)


def plan_json(plans: list[EpochPlan]) -> str:
    """`{"epochs": [...]}`: per epoch the ids each rank holds and trains on, in order, and its counts."""
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
