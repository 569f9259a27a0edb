"""Shuffle quality as MosaicML Streaming's simulator scores it: how unpredictable the jumps between
consecutive samples of an epoch are, in the samples' ids and in their shards' (mosaicml-streaming 0.13,
`simulation/core/shuffle_quality.py`, "entropy" metric).

The epoch is read as the accelerators take it: step by step, and within a step worker by worker, each
worker's batch in its order (Streaming's partition transposed to batch, worker, node, rank, sample).
The entropy of an ordering is that of the distribution of |id[k+1] − id[k]| over the N − 1 jumps, in
bits: 0 for ids read in order, about log2(N) for a uniform random permutation. The score is the harmonic
mean of the ids' entropy and the shards' (shard = id // G, G consecutive ids a shard), so that an order
must move both between and within shards to score high. It knows nothing of labels: the study holds it
beside label skew (analysis/labels.py) as a second predictor of accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def jump_entropy(ordering: np.ndarray) -> float:
    """Entropy (bits) of the absolute differences between consecutive entries of `ordering` (≥ 2 entries)."""
    ordering = np.asarray(ordering, dtype=np.int64)
    if len(ordering) < 2:
        raise ValueError(f"an ordering of {len(ordering)} entries has no jumps; it needs at least 2")
    counts = np.bincount(np.abs(np.diff(ordering)))
    shares = counts[counts > 0] / (len(ordering) - 1)
    return float(-(shares * np.log2(shares)).sum())


def step_major(orders: Sequence[np.ndarray], batch_size: int) -> np.ndarray:
    """One epoch's ids in the order the accelerators take them: for each step, for each worker, that worker's
    batch of `batch_size` (the last step's may be shorter) from its order in `orders`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    steps = max(-(-len(order) // batch_size) for order in orders)
    return np.concatenate([np.asarray(order[step * batch_size:(step + 1) * batch_size], dtype=np.int64)
                           for step in range(steps) for order in orders])


def entropy_quality(orders: Sequence[np.ndarray], batch_size: int, shard_samples: int) -> float:
    """Streaming's simulator's score of one epoch of per-worker `orders`: the harmonic mean of the jump
    entropy of the ids and of their shards (`shard_samples` consecutive ids each), read step-major."""
    if shard_samples < 1:
        raise ValueError(f"shard_samples must be at least 1, got {shard_samples}")
    ids = step_major(orders, batch_size)
    samples, shards = jump_entropy(ids), jump_entropy(ids // shard_samples)
    return 0.0 if samples + shards == 0 else 2 * samples * shards / (samples + shards)
