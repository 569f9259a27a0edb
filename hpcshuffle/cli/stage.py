"""`hpcshuffle stage`: copy each rank's epoch-0 samples from shared storage into node-local stores."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

from hpcshuffle.cli.plan import partition_arg
from hpcshuffle.plan import (
    HOME_SHARED,
    STRATEGIES,
    PlanSpec,
    Strategy,
    get_strategy,
    plan_epochs,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle stage` to `commands`."""
    from hpcshuffle.formats import FORMATS

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
    stage.add_argument("--ranks-per-node", type=int, default=1, metavar="R",
                       help="the training run's ranks sharing a node's partition (storage.scope=node); 1: rank scope")
    stage.add_argument("--partition", type=partition_arg, default="random",
                       help="the training run's storage.partition (default random)")
    stage.add_argument("--format", choices=sorted(FORMATS), default="imagefolder")
    stage.add_argument("--split", default=None, help="default: the format's training split")
    stage.add_argument("--threads", type=int, default=8, help="parallel copies per rank")
    stage.add_argument("--max-gib", type=float, default=None, help="cap on the space used per node")
    stage.add_argument("--ranks", default=None, help="single process: ranks to stage, e.g. 0-3")
    stage.set_defaults(run=cmd_stage)


def cmd_stage(args: argparse.Namespace) -> None:
    """Stage what each rank holds at epoch 0: one rank per MPI process, or several ranks of one node
    from a single process (taken to be that node's, in local-rank order)."""
    from hpcshuffle.comm.world import discover, on_root
    from hpcshuffle.formats import get_format
    from hpcshuffle.staging.stage import stage_stores
    from hpcshuffle.storage.layout import rank_dir
    from hpcshuffle.storage.store import Store

    strategy = get_strategy(args.shuffle)
    q = strategy.q_for(args.q)
    dataset_format = get_format(args.format)
    split = args.split or dataset_format.splits[0]
    world = discover()
    catalog = on_root(world, lambda: dataset_format.scan(Path(args.src), split), ValueError, OSError)
    spec = PlanSpec(len(catalog), args.workers, batch_size=1, q=q, seed=args.seed, ranks_per_node=args.ranks_per_node,
                    partition=args.partition, labels=catalog.labels)
    if world.size > 1:
        if world.size != args.workers:
            raise ValueError(f"--workers {args.workers} but this job has {world.size} MPI ranks; they must match")
        ranks, first_local_rank, local_size = [world.rank], world.local_rank, world.local_size
    else:
        ranks = parse_ranks(args.ranks, args.workers)
        first_local_rank, local_size = 0, len(ranks)
    targets = stage_targets(strategy, spec, ranks, first_local_rank, local_size)
    max_bytes = None if args.max_gib is None else int(args.max_gib * 2**30)
    plan_key = f"staged:{catalog.fingerprint()}:{args.workers}:{args.seed}"
    with ExitStack() as opened:
        stores = [opened.enter_context(Store(rank_dir(args.dst, rank))) for rank in ranks]
        stage_stores(world, stores, targets, catalog, headroom=strategy.headroom(spec), threads=args.threads,
                     max_bytes=max_bytes, progress=sys.stderr.isatty())
        for store in stores:
            store.commit(0, plan_key)


def stage_targets(
    strategy: Strategy, spec: PlanSpec, ranks: list[int], first_local_rank: int, local_size: int
) -> list[Iterable[int]]:
    """What each of `ranks` (consecutive local ranks from `first_local_rank` of a node of
    `local_size`) holds at epoch 0: its share of the node's replica where the strategy reads
    shared storage, else its partition in the epoch-0 plan."""
    from hpcshuffle.staging.stage import replica_ids

    if strategy.home == HOME_SHARED:
        return [replica_ids(spec.num_samples, first_local_rank + index, local_size) for index in range(len(ranks))]
    held = next(plan_epochs(spec, strategy.name, 1)).held
    return [held[rank] for rank in ranks]


def parse_ranks(text: str | None, workers: int) -> list[int]:
    """'3' or '0-7' (inclusive) → rank list; None → all ranks."""
    if text is None:
        return list(range(workers))
    first, _, last = text.partition("-")
    ranks = list(range(int(first), int(last or first) + 1))
    if not ranks or ranks[0] < 0 or ranks[-1] >= workers:
        raise ValueError(f"--ranks {text} is outside 0-{workers - 1}")
    return ranks
