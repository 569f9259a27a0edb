"""Global shuffling (GS): one permutation of the whole dataset per epoch, read from shared storage."""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.common import STREAM_ORDER, EpochPlan, PlanSpec, epoch_rng, pad_to


def plan_global(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Deal a global permutation, padded to M·⌈N/M⌉ like DistributedSampler, in contiguous chunks.

    Nothing is held locally (`held` is ignored and reported empty): every sample a rank trains
    on is read from shared storage.
    """
    del held
    permutation = epoch_rng(spec.seed, epoch, STREAM_ORDER).permutation(spec.num_samples)
    padded = pad_to(permutation, spec.num_ranks * spec.max_share)
    order = list(padded.reshape(spec.num_ranks, spec.max_share))
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=[np.empty(0, dtype=np.int64) for _ in range(spec.num_ranks)],
        order=order,
        reads_shared=[spec.max_share] * spec.num_ranks,
    )
