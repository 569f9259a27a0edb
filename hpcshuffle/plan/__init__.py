"""Shuffling plans: pure, seeded functions of the run's shape. No I/O, no MPI, no torch.

Adding a strategy means one module with a `plan_<name>(spec, held, epoch) -> EpochPlan`
function and one entry in `PLANNERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from hpcshuffle.plan.common import EpochPlan, Exchange, Loans, PlanSpec, initial_partition
from hpcshuffle.plan.global_ import plan_global
from hpcshuffle.plan.local import plan_local
from hpcshuffle.plan.locality import plan_locality
from hpcshuffle.plan.partial import moves_per_rank, plan_partial

# q is fixed by the strategy except for partial shuffling
FIXED_Q = {"local": 0.0, "global": 1.0, "locality": 0.0}

Planner = Callable[[PlanSpec, list[np.ndarray], int], EpochPlan]

PLANNERS: dict[str, Planner] = {
    "global": plan_global,
    "local": plan_local,
    "partial": plan_partial,
    "locality": plan_locality,
}


def get_planner(shuffle: str) -> Planner:
    try:
        return PLANNERS[shuffle]
    except KeyError:
        raise ValueError(f"unknown shuffle {shuffle!r}; choose one of {sorted(PLANNERS)}") from None


def plan_epochs(spec: PlanSpec, shuffle: str, epochs: int, start_epoch: int = 0) -> Iterator[EpochPlan]:
    """The plans of epochs [start_epoch, epochs), replaying the partition's history from epoch 0."""
    planner = get_planner(shuffle)
    held = initial_partition(spec)
    for epoch in range(epochs):
        plan = planner(spec, held, epoch)
        if epoch >= start_epoch:
            yield plan
        held = plan.next_held()


__all__ = [
    "EpochPlan",
    "Exchange",
    "Loans",
    "FIXED_Q",
    "PLANNERS",
    "PlanSpec",
    "get_planner",
    "initial_partition",
    "moves_per_rank",
    "plan_epochs",
]
