"""Shuffle quality as pair mixing: how many sample pairs have shared a worker, against global shuffling.

Nguyen et al. (2022), §IV-A "Limitations of the Equivalence": with synchronous SGD the summed
gradients of local and partial local shuffling are those of global shuffling, except that
BatchNorm normalises over each worker's local batch. What a strategy changes is therefore which
samples can meet in one worker's local batch, i.e. share BN statistics. We count that:

    C(e) = fraction of unordered pairs {i, j} trained on by the same worker in the same epoch,
           in at least one of epochs 0..e.

Under global shuffling the workers' sets of an epoch are a uniformly random placement of the N
samples into groups of sizes s_r (the distinct samples rank r trains on; untrained samples, as
with drop-last, are on no worker), independent between epochs. A pair then shares a worker with
probability p = Σ_r s_r(s_r − 1) / (N(N − 1)) per epoch, so the expected global-shuffling value is
C_GS(e) = 1 − Π_{k≤e} (1 − p_k), i.e. 1 − (1 − p)^(e+1) when the sizes do not change. The
quality C(e) / C_GS(e) is ≈ 1 for global shuffling. Local shuffling over a static partition
keeps C = p while C_GS → 1, so its quality falls to p ≈ 1/M; partial local shuffling lies in
between and grows with q, because every exchanged sample meets a new worker's samples.

C is estimated on a fixed, seeded set of K distinct pairs drawn uniformly without replacement
(all N(N − 1)/2 pairs when that is at most K, making C exact). Its binomial standard error is
sqrt(C(1 − C)/K), 0 in exact mode; the quality's is that divided by C_GS.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hpcshuffle.errors import at_least

DEFAULT_PAIRS = 100_000  # stderr of C at most 0.0016: quality to ~±0.5 % once C_GS ≳ 0.3


def pair_count(num_samples: int) -> int:
    """N(N − 1)/2, the unordered pairs of distinct samples."""
    return num_samples * (num_samples - 1) // 2


def sample_pairs(num_samples: int, num_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Distinct unordered pairs, uniformly without replacement; every pair if there are at most `num_pairs`.

    A pair is drawn as its index k in the row-major list of (i, j), i < j, and decoded by the
    start of each row i, so the draw is exact integer arithmetic for any N.

    Returns:
        (first, second): int64 arrays (K,) with first < second, sorted by (first, second);
        K = min(num_pairs, N(N − 1)/2).
    """
    total = pair_count(num_samples)
    if total <= num_pairs:
        index = np.arange(total, dtype=np.int64)
    else:
        # Floyd's algorithm for K ≪ total, a partial shuffle otherwise: never materialises 8·10^11 pairs
        index = np.sort(rng.choice(total, size=num_pairs, replace=False).astype(np.int64))
    row_lengths = np.arange(num_samples - 1, 0, -1, dtype=np.int64)  # row i pairs i with i+1..N-1
    row_starts = np.cumsum(row_lengths) - row_lengths
    first = np.searchsorted(row_starts, index, side="right") - 1
    second = index - row_starts[first] + first + 1
    return first, second


class PairMixing:
    """C(e), the fraction of sample pairs that have shared a worker, and its ratio to global shuffling.

    Feed the epochs of one run in order, 0, 1, 2, ...; each call returns that epoch's cumulative values.

    Args:
        num_samples: N, samples in the training set (ids 0..N-1), at least 2.
        num_ranks: M, data-parallel workers.
        pairs: K, the pair budget; all pairs (exact C) when N(N − 1)/2 <= K.
        seed: seeds the pair set; the same seed gives the same pairs and the same numbers.
    """

    def __init__(self, num_samples: int, num_ranks: int, pairs: int = DEFAULT_PAIRS, seed: int = 0) -> None:
        if num_samples < 2:
            raise ValueError(f"pair mixing needs at least 2 samples, got num_samples = {num_samples}")
        at_least("workers", num_ranks)
        at_least("the pair budget", pairs)
        at_least("seed", seed, 0)
        self.num_samples = num_samples
        self.num_ranks = num_ranks
        self.exact = pair_count(num_samples) <= pairs
        self.first, self.second = sample_pairs(num_samples, pairs, np.random.default_rng(seed))
        self.together = np.zeros(len(self.first), dtype=bool)
        self.epochs = 0
        self.gs_apart = 1.0  # Π_k (1 − p_k): a pair's chance never to have met under global shuffling
        # int32 halves the gather traffic; reused every epoch
        self.rank_of = np.empty(num_samples, dtype=np.int32 if num_ranks < 2**31 else np.int64)

    @property
    def num_pairs(self) -> int:
        """K, the pairs followed (all N(N − 1)/2 in exact mode)."""
        return len(self.first)

    def add_epoch(self, order: Sequence[np.ndarray]) -> dict[str, float]:
        """Record epoch `self.epochs` and return the cumulative mixing after it.

        Args:
            order: order[r], the sample ids rank r trains on this epoch (any order; ids repeated
                by padding count once, on the last rank that lists them).

        Returns:
            {"pairs_together": C, "gs_expected": C_GS, "quality": C / C_GS,
            "stderr": the quality's binomial standard error}; quality and stderr are nan when
            C_GS = 0 (every worker trains on at most one sample, so no pair can ever meet).
        """
        sizes = self.place(order)
        num_samples = self.num_samples
        meet_probability = float(np.sum(sizes * (sizes - 1))) / (num_samples * (num_samples - 1))
        rank_first = self.rank_of[self.first]
        self.together |= (rank_first == self.rank_of[self.second]) & (rank_first >= 0)
        self.gs_apart *= 1.0 - meet_probability
        self.epochs += 1

        pairs_together = float(np.count_nonzero(self.together)) / self.num_pairs
        gs_expected = 1.0 - self.gs_apart
        if self.exact:
            stderr_c = 0.0
        else:
            stderr_c = float(np.sqrt(pairs_together * (1.0 - pairs_together) / self.num_pairs))
        if gs_expected > 0.0:
            quality, stderr = pairs_together / gs_expected, stderr_c / gs_expected
        else:
            quality = stderr = float("nan")
        return {"pairs_together": pairs_together, "gs_expected": gs_expected, "quality": quality, "stderr": stderr}

    def place(self, order: Sequence[np.ndarray]) -> np.ndarray:
        """Fill `self.rank_of` (-1: trained by no rank) from one epoch's orders, checking them.

        Returns:
            int64 array (M,): s_r, the distinct samples each rank trains on.
        """
        epoch = self.epochs
        if len(order) != self.num_ranks:
            raise ValueError(f"epoch {epoch}: got orders for {len(order)} ranks, expected num_ranks = {self.num_ranks}")
        arrays = [np.asarray(ids) for ids in order]
        for rank, ids in enumerate(arrays):
            if ids.ndim != 1:
                raise ValueError(f"epoch {epoch}: rank {rank}'s order must be 1-D, got shape {ids.shape}")
            if ids.size and ids.dtype.kind not in "iu":
                raise ValueError(f"epoch {epoch}: rank {rank}'s order must hold integer ids, got dtype {ids.dtype}")
        lengths = np.array([ids.size for ids in arrays], dtype=np.int64)
        sample_ids = np.concatenate([ids.astype(np.int64, copy=False) for ids in arrays])
        ranks = np.repeat(np.arange(self.num_ranks, dtype=self.rank_of.dtype), lengths)
        if sample_ids.size:
            low, high = int(sample_ids.min()), int(sample_ids.max())
            if low < 0 or high >= self.num_samples:
                bad = low if low < 0 else high
                rank = int(ranks[np.flatnonzero(sample_ids == bad)[0]])
                raise ValueError(
                    f"epoch {epoch}: rank {rank} trains on sample {bad}, outside 0..{self.num_samples - 1} "
                    f"(num_samples = {self.num_samples})"
                )
        self.rank_of.fill(-1)
        # a sample on two ranks (global shuffling's padding when M does not divide N: fewer than M
        # samples) counts on the last rank that lists it
        self.rank_of[sample_ids] = ranks
        trained = self.rank_of[self.rank_of >= 0]
        return np.bincount(trained, minlength=self.num_ranks).astype(np.int64)
