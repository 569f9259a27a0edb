"""CorgiPile (Xu et al., SIGMOD 2022): block-wise shuffling through a buffer, read from shared storage.

The dataset is cut into blocks of G consecutive ids (`PlanSpec.shard_samples`: a packed dataset's
shards, or shuffle.block for one stored a file a sample). Every epoch the blocks are read in a
random order, each block sequentially; the buffer takes ⌊B/G⌋ blocks (at least one) at a time,
its tuples are shuffled and all of them emitted, and it fills again: CorgiPile's two levels, a
block shuffle and a tuple shuffle within the buffer. B = 0 means ten blocks. The stream is dealt to the workers in contiguous runs, as each of CorgiPile's workers reads
blocks of its own, padded to M·⌈N/M⌉ like DistributedSampler. Like GS, every sample comes from
shared storage every epoch, but in G-sample sequential reads instead of single random ones.
"""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.common import (
    STREAM_ORDER,
    EpochPlan,
    PlanSpec,
    dealt_from_shared,
    epoch_rng,
)

BUFFER_BLOCKS = 10  # the buffer when shuffle.buffer is 0, in blocks


def block_stream(num_samples: int, block: int, buffer: int, rng: np.random.Generator) -> np.ndarray:
    """Every id once: the blocks of `block` consecutive ids in a random order, taken ⌊buffer/block⌋ at
    a time (at least one; `buffer` 0: BUFFER_BLOCKS) and shuffled together, fill after fill."""
    per_fill = max(1, buffer // block) if buffer else BUFFER_BLOCKS
    blocks = rng.permutation(-(-num_samples // block))
    ids = np.concatenate([np.arange(b * block, min((b + 1) * block, num_samples)) for b in blocks])
    ends = np.cumsum([min(block, num_samples - b * block) for b in blocks])  # each block's end in `ids`
    cuts = ends[per_fill - 1 :: per_fill]
    return np.concatenate([rng.permutation(fill) for fill in np.split(ids, cuts) if len(fill)])


def plan_corgipile(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Deal the epoch's buffered block stream in contiguous runs; nothing is held locally (`held` is
    ignored and reported empty)."""
    del held
    return dealt_from_shared(spec, epoch, block_stream(spec.num_samples, spec.shard_samples, spec.shuffle_buffer,
                                                       epoch_rng(spec.seed, epoch, STREAM_ORDER)))
