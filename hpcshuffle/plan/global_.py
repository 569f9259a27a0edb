"""Global shuffling (GS): one permutation of the whole dataset per epoch, read from shared storage."""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.common import (
    STREAM_ORDER,
    EpochPlan,
    PlanSpec,
    dealt_from_shared,
    epoch_rng,
)


def plan_global(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Deal a global permutation, padded to M·⌈N/M⌉ like DistributedSampler, in contiguous chunks.

    Nothing is held locally (`held` is ignored and reported empty): every sample a rank trains
    on is read from shared storage.
    """
    del held
    return dealt_from_shared(spec, epoch, epoch_rng(spec.seed, epoch, STREAM_ORDER).permutation(spec.num_samples))
