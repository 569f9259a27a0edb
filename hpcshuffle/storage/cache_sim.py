"""A cache policy run over a rank's planned reads: the hits it serves and the decisions a loader replays.

`rank_trace` gives the ids a rank reads, in order, from the plan; `simulate` steps a policy of
`cache.POLICIES` through that trace and returns how many reads the cache serves per epoch and,
on request, the per-access decisions a loader replays on a real node-local cache (see
`CacheDecisions`, and node_cache.py for the replay). Pure numpy and Python: no torch, no MPI, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcshuffle.errors import at_least
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.cache import NO_EVICTION, Future, as_trace, get_policy


@dataclass(frozen=True)
class CacheDecisions:
    """What the cache does at each position p of the trace, for a loader to replay on a real cache.

    At position p, in this order:
      1. read trace[p]: from the cache if hit[p], else from shared storage;
      2. delete from the cache every id in `evicted_at(p)` (at most one with these policies);
      3. if admit[p], write trace[p] (a miss, just read) into the cache.
    The cache then holds at most `capacity` samples; hit[p] and admit[p] are never both true, and
    an id is evicted only while cached. The misses are known in advance, so a loader may prefetch
    them; it must still apply the evictions and writes in position order.

    Attributes:
        hit: bool (n,), read p is served by the cache.
        admit: bool (n,), the sample read at p is written into the cache after the read.
        evict_pos: int64 (k,), nondecreasing positions at which a sample leaves the cache.
        evict_id: int64 (k,), the sample ids (as in the trace) that leave, aligned with evict_pos.
    """

    hit: np.ndarray
    admit: np.ndarray
    evict_pos: np.ndarray
    evict_id: np.ndarray

    def evicted_at(self, position: int) -> np.ndarray:
        """int64 (0 or more,): the ids deleted from the cache at `position`."""
        start, stop = np.searchsorted(self.evict_pos, [position, position + 1])
        return self.evict_id[start:stop]


@dataclass(frozen=True)
class CacheResult:
    """Reads served by one policy on one trace.

    Attributes:
        policy: the policy's name in `POLICIES`.
        capacity: cache size in samples.
        epoch_hits: int64 (E,), reads served by the cache in each epoch.
        epoch_accesses: int64 (E,), reads in each epoch.
        decisions: the per-access decisions, if asked for.
    """

    policy: str
    capacity: int
    epoch_hits: np.ndarray
    epoch_accesses: np.ndarray
    decisions: CacheDecisions | None = None

    @property
    def hits(self) -> int:
        """Reads the cache served, over all epochs."""
        return int(self.epoch_hits.sum())

    @property
    def accesses(self) -> int:
        """Reads, over all epochs."""
        return int(self.epoch_accesses.sum())

    @property
    def misses(self) -> int:
        """Reads that went to shared storage, over all epochs."""
        return self.accesses - self.hits

    @property
    def hit_ratio(self) -> float:
        """hits / accesses over all epochs; 0 without reads."""
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def epoch_hit_ratio(self) -> np.ndarray:
        """float64 (E,); 0 for an epoch without reads."""
        ratio = np.zeros(len(self.epoch_hits))
        np.divide(self.epoch_hits, self.epoch_accesses, out=ratio, where=self.epoch_accesses > 0)
        return ratio


def _check_epoch_lengths(epoch_lengths: np.ndarray | None, length: int) -> np.ndarray:
    if epoch_lengths is None:
        return np.array([length], dtype=np.int64)
    lengths = np.asarray(epoch_lengths, dtype=np.int64).reshape(-1)
    if (lengths < 0).any() or lengths.sum() != length:
        raise ValueError(
            f"epoch_lengths must be >= 0 and sum to the trace length {length}, "
            f"got sum {int(lengths.sum())} over {len(lengths)} epochs"
        )
    return lengths


def simulate(
    trace: np.ndarray,
    capacity: int,
    policy: str,
    epoch_lengths: np.ndarray | None = None,
    *,
    decisions: bool = False,
) -> CacheResult:
    """Run a cache of `capacity` samples with `policy` over a known trace.

    Args:
        trace: int (n,), sample ids in the order the rank reads them.
        capacity: samples the cache holds; 0 means no cache (every read misses).
        policy: a name in `POLICIES`.
        epoch_lengths: int (E,), reads per epoch, summing to n; default one epoch.
        decisions: also return the per-access `CacheDecisions`.

    Returns:
        The hits and reads, per epoch, and the decisions if asked for.
    """
    policy_class = get_policy(policy)
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
        raise ValueError(f"cache capacity must be an integer >= 0 (samples; 0 = no cache), got {capacity!r}")
    capacity = int(capacity)
    trace = as_trace(trace)
    lengths = _check_epoch_lengths(epoch_lengths, len(trace))
    future = Future.of(trace)
    access = policy_class(capacity, future).access

    hit_flags, admit_flags = bytearray(len(trace)), bytearray(len(trace))
    evictions: list[tuple[int, int]] = []
    for position, sample in enumerate(future.dense.tolist()):
        hit, admitted, victim = access(position, sample)
        if hit:
            hit_flags[position] = 1
        if admitted:
            admit_flags[position] = 1
        if victim != NO_EVICTION:
            evictions.append((position, victim))

    hit = np.frombuffer(hit_flags, dtype=np.uint8).astype(bool)
    epoch_of = np.repeat(np.arange(len(lengths)), lengths)
    chosen = None
    if decisions:
        evicted = np.array(evictions, dtype=np.int64).reshape(-1, 2)
        chosen = CacheDecisions(
            hit=hit,
            admit=np.frombuffer(admit_flags, dtype=np.uint8).astype(bool),
            evict_pos=evicted[:, 0].copy(),
            evict_id=future.ids[evicted[:, 1]],
        )
    return CacheResult(
        policy=policy,
        capacity=capacity,
        epoch_hits=np.bincount(epoch_of[hit], minlength=len(lengths)).astype(np.int64),
        epoch_accesses=lengths,
        decisions=chosen,
    )


def rank_trace(
    spec: PlanSpec, shuffle: str, epochs: int, rank: int, start_epoch: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The ids `rank` reads in epochs [start_epoch, epochs) of the plan, in order.

    Returns:
        (trace int64 ((epochs - start_epoch)·⌈N/M⌉,), epoch_lengths int64 (epochs - start_epoch,)).
    """
    if not 0 <= rank < spec.num_ranks:
        raise ValueError(f"rank must be in [0, {spec.num_ranks}), got {rank}")
    at_least("epochs", epochs, 0)
    plans = plan_epochs(spec, shuffle, epochs, start_epoch)
    orders = [np.asarray(plan.order[rank], dtype=np.int64) for plan in plans]
    lengths = np.array([len(order) for order in orders], dtype=np.int64)
    trace = np.concatenate(orders) if orders else np.empty(0, dtype=np.int64)
    return trace, lengths
