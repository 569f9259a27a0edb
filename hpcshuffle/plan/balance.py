"""Load balancing of a global mini-batch over learners: Yang & Cong (2019), Algorithm 1.

Given how many samples of a global batch each learner holds and how many it must train on,
surplus learners send to deficit learners. The greedy pairing of the largest surplus with the
largest deficit fixes at least one learner per transfer, so there are at most p − 1 transfers
(a 2-approximation of the NP-complete minimum, which needs at least p/2 when all are imbalanced).
"""

from __future__ import annotations

import heapq

import numpy as np


def balance(counts: np.ndarray, targets: np.ndarray) -> list[tuple[int, int, int]]:
    """The transfers that bring every learner from `counts[r]` samples to `targets[r]`.

    Args:
        counts: int array (p,), samples of the global batch each learner holds.
        targets: int array (p,), samples each learner must train on; same sum as `counts`.

    Returns:
        (source, destination, how many) triples, in the order Algorithm 1 records them.
        Ties between equal imbalances go to the lower learner id, so every rank computes the
        same schedule.
    """
    counts, targets = np.asarray(counts, dtype=np.int64), np.asarray(targets, dtype=np.int64)
    if counts.shape != targets.shape:
        raise ValueError(f"counts has shape {counts.shape} but targets {targets.shape}")
    if counts.sum() != targets.sum():
        raise ValueError(
            f"learners hold {counts.sum()} samples of the batch but must train on {targets.sum()}; "
            "samples no cache holds must be assigned (read from shared storage) before balancing"
        )
    imbalance = counts - targets
    # heapq is a min-heap: store negated imbalances so the largest comes first
    surplus = [(-int(amount), rank) for rank, amount in enumerate(imbalance) if amount > 0]
    deficit = [(int(amount), rank) for rank, amount in enumerate(imbalance) if amount < 0]
    heapq.heapify(surplus)
    heapq.heapify(deficit)
    transfers = []
    while surplus:
        negative_extra, source = heapq.heappop(surplus)
        negative_missing, destination = heapq.heappop(deficit)
        extra, missing = -negative_extra, -negative_missing
        moved = min(extra, missing)
        transfers.append((source, destination, moved))
        if extra > moved:
            heapq.heappush(surplus, (-(extra - moved), source))
        if missing > moved:
            heapq.heappush(deficit, (-(missing - moved), destination))
    return transfers
