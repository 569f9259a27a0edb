"""Shards as the unit of partitioning and exchange (`PlanSpec.shard_samples` G > 1).

A packed dataset (tar shards of G samples, `hpcshuffle pack --shard-samples G`) numbers its
samples shard by shard, so shard j is the ids [jG, (j+1)G). With G > 1 the plan works on those
shards instead of single samples, and stays exact:

- **Partition**: the shards are shuffled (kept in order for `partition=contiguous`), laid end
  to end and cut into one run of samples per node, then per rank, exactly as sample plans cut
  the ids, so every rank still holds ⌊N/M⌋ or ⌈N/M⌉ samples and trains ⌈N/M⌉ per epoch. A cut
  that falls inside a shard leaves a *fragment* on each side; a rank holds whole shards and at
  most two fragments (and the dataset's short last shard is a fragment too).
- **Exchange**: Algorithm 1 moves whole shards. Each slot, every node sends one whole shard,
  from the store of its local rank i mod R, and receives one, so every store keeps its size and
  the (1+q)·N/nodes bound holds. A node moves ⌊q·⌊N/nodes⌋ / G⌋ shards (fewer if its ranks hold
  fewer whole shards); fragments stay where the partition put them. A shard larger than what q
  lets a node move in an epoch is refused by name: nothing would ever move.
- **Order** (`PlanSpec.shuffle_buffer` B > 0): a node reads its shards in a shuffled order, each
  sequentially, through a buffer of B samples (WebDataset's shuffle buffer: each step trains a
  random sample of the buffer and the next sample read takes its place). B = 0 is a full
  shuffle of what the node holds, which node-local stores afford.
"""

from __future__ import annotations

import numpy as np


def dealt_ids(num_samples: int, shard_samples: int, rng: np.random.Generator | None) -> np.ndarray:
    """The ids laid end to end shard by shard, the shards in a random order (`rng`) or in order (None)."""
    shards = -(-num_samples // shard_samples)
    order = np.arange(shards) if rng is None else rng.permutation(shards)
    starts = order * shard_samples
    lengths = np.minimum(starts + shard_samples, num_samples) - starts
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(num_samples)


def whole_shards(ids: np.ndarray, shard_samples: int, num_samples: int) -> np.ndarray:
    """The shards (sorted) of which `ids` holds every sample; a short last shard never counts."""
    shards, counts = np.unique(ids // shard_samples, return_counts=True)
    whole = shards[counts == shard_samples]
    return whole[(whole + 1) * shard_samples <= num_samples]


def shard_ids(shards: np.ndarray, shard_samples: int) -> np.ndarray:
    """The sample ids of whole `shards`, shard after shard."""
    return (np.asarray(shards, dtype=np.int64)[:, None] * shard_samples + np.arange(shard_samples)).reshape(-1)


def buffered_order(ids: np.ndarray, shard_samples: int, buffer: int, rng: np.random.Generator) -> np.ndarray:
    """`ids` as a reader of a shuffled shard order through a shuffle buffer of `buffer` samples gives them.

    The shards `ids` touch are read in a random order, each one's samples in id order (a
    sequential read); each step emits a random sample of the buffer and puts the next one read in
    its place; what is left at the end comes out shuffled.
    """
    ids = np.sort(ids)
    shard_of = ids // shard_samples
    starts = np.flatnonzero(np.r_[True, shard_of[1:] != shard_of[:-1]])
    bounds = np.r_[starts, len(ids)]
    stream = np.concatenate([ids[bounds[j] : bounds[j + 1]] for j in rng.permutation(len(starts))])
    size = min(buffer, len(stream))
    pool, out = stream[:size].copy(), np.empty(len(stream), dtype=np.int64)
    picks = rng.integers(0, size, len(stream) - size)
    for step, (pick, incoming) in enumerate(zip(picks.tolist(), stream[size:].tolist())):
        out[step] = pool[pick]
        pool[pick] = incoming
    out[len(stream) - size :] = rng.permutation(pool)
    return out
