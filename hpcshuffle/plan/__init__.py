"""Shuffling plans: pure, seeded functions of the run's shape. No I/O, no MPI, no torch (streaming.py
alone asks a helper process for MosaicML Streaming's orders, whose package runs in the peers' venv).

The plan is the whole per-step script of a run: per epoch and rank, the ids held at the start,
the order trained in, where each position's sample comes from (`EpochPlan.sources`), and the
moves (exchange) and one-step loans between ranks. `STRATEGIES` (strategies.py) says what each
strategy means to the rest of the program; adding one means a `plan_<name>(spec, held, epoch)`
module and one `Strategy` entry there.
"""

from __future__ import annotations

from collections.abc import Iterator

from hpcshuffle.plan.common import (
    FROM_LOAN,
    FROM_SHARED,
    FROM_STORE,
    PARTITIONS,
    EpochPlan,
    Exchange,
    Loans,
    PlanSpec,
    check_partition,
    initial_partition,
)
from hpcshuffle.plan.partial import moves_per_rank
from hpcshuffle.plan.strategies import (
    HOME_SHARED,
    HOME_STORE,
    PATH_EXCHANGE,
    PATH_LOANS,
    PATH_SHARED,
    PATH_STORE,
    STRATEGIES,
    Strategy,
    get_strategy,
    run_label,
    with_role,
)


def plan_epochs(spec: PlanSpec, shuffle: str, epochs: int, start_epoch: int = 0) -> Iterator[EpochPlan]:
    """The plans of epochs [start_epoch, epochs), replaying the partition's history from epoch 0."""
    planner = get_strategy(shuffle).planner
    held = initial_partition(spec)
    for epoch in range(epochs):
        plan = planner(spec, held, epoch)
        if epoch >= start_epoch:
            yield plan
        held = plan.next_held()


__all__ = [
    "FROM_LOAN", "FROM_SHARED", "FROM_STORE", "HOME_SHARED", "PARTITIONS", "HOME_STORE", "PATH_EXCHANGE", "PATH_LOANS",
    "PATH_SHARED", "PATH_STORE", "STRATEGIES", "EpochPlan", "Exchange", "Loans", "PlanSpec", "Strategy",
    "check_partition", "get_strategy", "initial_partition", "moves_per_rank", "plan_epochs", "run_label", "with_role",
]
