"""Local shuffling (LS): each rank reshuffles the same node-local partition every epoch."""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.common import EpochPlan, PlanSpec, local_orders


def plan_local(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Train on `held` in a fresh per-rank order; nothing moves, nothing is read from shared storage."""
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=held,
        order=local_orders(spec, held, epoch),
        reads_shared=[0] * spec.num_ranks,
    )
