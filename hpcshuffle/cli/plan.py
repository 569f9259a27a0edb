"""`hpcshuffle plan`: dry-run a shuffling plan and print its partitions, exchanges and storage."""

from __future__ import annotations

import argparse
import json

import numpy as np

from hpcshuffle.plan import (
    PARTITIONS,
    STRATEGIES,
    EpochPlan,
    PlanSpec,
    get_strategy,
    plan_epochs,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser("plan", help="dry-run a shuffling plan: partitions, exchanges, storage")
    plan.add_argument("--samples", type=int, required=True, help="N, training samples")
    plan.add_argument("--workers", type=int, required=True, help="M, ranks")
    plan.add_argument("--shuffle", choices=sorted(STRATEGIES), required=True)
    plan.add_argument("--q", type=float, default=None, help="fraction exchanged per epoch (partial)")
    plan.add_argument("--batch", type=int, default=32, help="b, samples per rank per iteration")
    plan.add_argument("--epochs", type=int, default=3)
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--ranks-per-node", type=int, default=1, metavar="R",
                      help="ranks sharing a node's partition (storage.scope=node); 1: rank scope")
    plan.add_argument("--partition", choices=PARTITIONS, default="random",
                      help="how the first partition is cut (storage.partition; default random)")
    plan.add_argument("--shard-samples", type=int, default=1, metavar="G",
                      help="partition and exchange whole shards of G samples (shuffle.unit=shard); 1: samples")
    plan.add_argument("--buffer", type=int, default=0, metavar="B",
                      help="read each node's shards through a shuffle buffer of B samples (shuffle.buffer); 0: full shuffle")
    plan.add_argument("--json", action="store_true", help="per epoch and rank: ids held and order")
    plan.set_defaults(run=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> None:
    q = get_strategy(args.shuffle).q_for(args.q)
    spec = PlanSpec(args.samples, args.workers, args.batch, q, args.seed, args.ranks_per_node, args.partition,
                    args.shard_samples, args.buffer)
    plans = list(plan_epochs(spec, args.shuffle, args.epochs))
    print(plan_json(plans) if args.json else plan_summary(plans))


def plan_summary(plans: list[EpochPlan]) -> str:
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
