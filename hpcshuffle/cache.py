"""A rank's sample cache when its future reads are known from the plan (Lobster §4.4, NoPFS, LRU).

The plan fixes, from the shared seed, every id a rank will train on, so the rank's *trace* (the
concatenation over epochs of `plan.order[rank]`) is known before training starts. A cache of
`capacity` samples in front of shared storage can therefore be planned offline: `simulate` steps
a policy through the trace and returns how many reads the cache serves and, on request, the
per-access decisions a loader replays on a real node-local cache (see `CacheDecisions`).

Policies (`POLICIES`, name → class):

- `lru`: evict the least recently used sample; insert every miss. Knows nothing of the future.
- `nopfs`: NoPFS-style clairvoyant caching by access frequency: the cache is reserved for the
  `capacity` ids this rank reads most often over the run (ties: the one read first), each written
  on its first read (the read a prefetcher moves ahead of time), and never evicted.
- `reuse_count`: Lobster's reuse-count policy: evict the sample with the fewest reads left in the
  trace (ties: the one needed last); a miss with fewer reads left than that victim (on a tie:
  needed no sooner) bypasses the cache.
- `reuse_distance`: Lobster's reuse-distance policy: evict the sample whose next read is farthest
  away; a newly read sample needed later than every cached one bypasses the cache (Belady's MIN
  with bypass, which serves the most reads any cache of this size can).

Both Lobster policies drop a sample right after its last read and never cache one that is not
read again, so the space goes to prefetches as soon as it is free.

A *hit* is a read served without touching shared storage. A prefetch moves a read earlier but
does not remove it, so every policy pays one miss for the first read of each id it caches.
Pure numpy and Python: no torch, no MPI, no I/O.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from hpcshuffle.plan import PlanSpec, plan_epochs

NO_EVICTION = -1


def _as_trace(trace: np.ndarray) -> np.ndarray:
    trace = np.asarray(trace)
    if trace.ndim != 1:
        raise ValueError(f"a trace is a 1-D array of sample ids, got shape {trace.shape}")
    if len(trace) and not np.issubdtype(trace.dtype, np.integer):
        raise ValueError(f"sample ids must be integers, got dtype {trace.dtype}")
    return trace.astype(np.int64, copy=False)


def next_use(trace: np.ndarray) -> np.ndarray:
    """Where each access's id is read next.

    Args:
        trace: int (n,), sample ids in access order.

    Returns:
        int64 (n,): for position p, the smallest q > p with trace[q] == trace[p], or n if none.
    """
    trace = _as_trace(trace)
    length = len(trace)
    # a stable sort lists each id's positions in increasing order, so each position's successor
    # in that list is its next use: one vectorised pass instead of a Python loop over the trace
    order = np.argsort(trace, kind="stable")
    result = np.full(length, length, dtype=np.int64)
    same = trace[order[1:]] == trace[order[:-1]]
    result[order[:-1][same]] = order[1:][same]
    return result


@dataclass(frozen=True)
class Future:
    """What the whole trace says about each access, computed once before a simulation.

    Attributes:
        ids: int64 (D,), the distinct sample ids, sorted; dense id d stands for ids[d].
        dense: int64 (n,), the trace in dense ids 0..D-1.
        next_use: int64 (n,), see `next_use`.
        reads_left: int64 (n,), reads of trace[p] after position p.
        first_use: int64 (D,), position of each dense id's first read.
        count: int64 (D,), reads of each dense id in the whole trace.
    """

    ids: np.ndarray
    dense: np.ndarray
    next_use: np.ndarray
    reads_left: np.ndarray
    first_use: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, trace: np.ndarray) -> Future:
        trace = _as_trace(trace)
        ids, first_use, dense, count = np.unique(trace, return_index=True, return_inverse=True, return_counts=True)
        dense = dense.reshape(-1).astype(np.int64)
        order = np.argsort(dense, kind="stable")
        # k-th read of an id (from 0) in sorted order; reads left = count - 1 - k
        group_start = np.repeat(np.cumsum(count) - count, count)
        occurrence = np.empty(len(trace), dtype=np.int64)
        occurrence[order] = np.arange(len(trace)) - group_start
        return cls(
            ids=ids.astype(np.int64),
            dense=dense,
            next_use=next_use(dense),
            reads_left=count[dense] - 1 - occurrence,
            first_use=first_use.astype(np.int64),
            count=count.astype(np.int64),
        )

    def __len__(self) -> int:
        return len(self.dense)


class CachePolicy:
    """One cache's admission and eviction rule, stepped through a trace one access at a time.

    A policy is built for one trace (its `Future`) and `access` must be called for positions
    0, 1, 2, ... in order. Samples are dense ids (see `Future`).
    """

    def __init__(self, capacity: int, future: Future) -> None:
        self.capacity = capacity
        self.future = future

    def access(self, position: int, sample: int) -> tuple[bool, bool, int]:
        """Serve the read at `position`: (hit, admitted, evicted dense id or NO_EVICTION)."""
        raise NotImplementedError


class LRUPolicy(CachePolicy):
    """Least recently used: insert on every miss, evict the sample read longest ago."""

    def __init__(self, capacity: int, future: Future) -> None:
        super().__init__(capacity, future)
        self._cached: OrderedDict[int, None] = OrderedDict()

    def access(self, position: int, sample: int) -> tuple[bool, bool, int]:
        cached = self._cached
        if sample in cached:
            cached.move_to_end(sample)
            return True, False, NO_EVICTION
        if self.capacity == 0:
            return False, False, NO_EVICTION
        victim = NO_EVICTION
        if len(cached) >= self.capacity:
            victim, _ = cached.popitem(last=False)
        cached[sample] = None
        return False, True, victim


class NoPFSPolicy(CachePolicy):
    """Static by frequency: reserve the cache for the `capacity` most-read ids, never evict.

    Ranking is by reads over the whole trace, ties broken by the earlier first read. Ids read
    only once are left out: caching them could never serve a read.
    """

    def __init__(self, capacity: int, future: Future) -> None:
        super().__init__(capacity, future)
        ranking = np.lexsort((future.first_use, -future.count))  # last key is the primary one
        chosen = ranking[:capacity]
        chosen = chosen[future.count[chosen] > 1]
        admitted = np.zeros(len(future.ids), dtype=bool)
        admitted[chosen] = True
        self._admitted = admitted.tolist()
        self._cached: set[int] = set()

    def access(self, position: int, sample: int) -> tuple[bool, bool, int]:
        if sample in self._cached:
            return True, False, NO_EVICTION
        if self._admitted[sample]:
            self._cached.add(sample)
            return False, True, NO_EVICTION
        return False, False, NO_EVICTION


class _ValuePolicy(CachePolicy):
    """Keep the cached samples of highest value, where the plan gives every sample's value ahead.

    `values()` gives, for each position, the value of the sample read there *after* that read;
    a cached sample's value changes only when it is read, so a min-heap with lazy deletion finds
    the victim in O(log n). A sample with no read left is dropped at its last read (Lobster's
    reuse-count rule) and never admitted. A miss is admitted only if it is worth more than the
    victim, otherwise it bypasses the cache.
    """

    def __init__(self, capacity: int, future: Future) -> None:
        super().__init__(capacity, future)
        self._value = self.values(future).tolist()
        self._alive = (future.next_use < len(future)).tolist()
        self._current: dict[int, int] = {}  # cached sample -> its value now
        # (value, sample); an entry is stale once the sample is read again or evicted. Values
        # encode the next-use position, unique per read, so a stale entry never equals a live one.
        self._heap: list[tuple[int, int]] = []

    @staticmethod
    def values(future: Future) -> np.ndarray:
        raise NotImplementedError

    def _push(self, sample: int, value: int) -> None:
        self._current[sample] = value
        heapq.heappush(self._heap, (value, sample))
        if len(self._heap) > 2 * len(self._current) + 1024:  # drop stale entries, amortised O(1)
            self._heap = [(value, sample) for sample, value in self._current.items()]
            heapq.heapify(self._heap)

    def _least_valuable(self) -> tuple[int, int]:
        heap, current = self._heap, self._current
        while current.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0]

    def access(self, position: int, sample: int) -> tuple[bool, bool, int]:
        current = self._current
        if sample in current:
            if not self._alive[position]:
                del current[sample]  # served its last read
                return True, False, sample
            self._push(sample, self._value[position])
            return True, False, NO_EVICTION
        if not self._alive[position] or self.capacity == 0:
            return False, False, NO_EVICTION
        value = self._value[position]
        victim = NO_EVICTION
        if len(current) >= self.capacity:
            lowest, victim = self._least_valuable()
            if value <= lowest:
                return False, False, NO_EVICTION
            heapq.heappop(self._heap)
            del current[victim]
        self._push(sample, value)
        return False, True, victim


class ReuseCountPolicy(_ValuePolicy):
    """Lobster reuse count: worth = reads left, then the nearer next read."""

    @staticmethod
    def values(future: Future) -> np.ndarray:
        length = len(future)
        return future.reads_left * (length + 1) + (length - future.next_use)


class ReuseDistancePolicy(_ValuePolicy):
    """Lobster reuse distance: worth = nearness of the next read (Belady's MIN with bypass)."""

    @staticmethod
    def values(future: Future) -> np.ndarray:
        return -future.next_use


POLICIES: dict[str, type[CachePolicy]] = {
    "lru": LRUPolicy,
    "nopfs": NoPFSPolicy,
    "reuse_count": ReuseCountPolicy,
    "reuse_distance": ReuseDistancePolicy,
}


def get_policy(name: str) -> type[CachePolicy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown cache policy {name!r}; choose one of {sorted(POLICIES)}") from None


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
        return int(self.epoch_hits.sum())

    @property
    def accesses(self) -> int:
        return int(self.epoch_accesses.sum())

    @property
    def misses(self) -> int:
        return self.accesses - self.hits

    @property
    def hit_ratio(self) -> float:
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
    trace = _as_trace(trace)
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
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    plans = plan_epochs(spec, shuffle, epochs, start_epoch)
    orders = [np.asarray(plan.order[rank], dtype=np.int64) for plan in plans]
    lengths = np.array([len(order) for order in orders], dtype=np.int64)
    trace = np.concatenate(orders) if orders else np.empty(0, dtype=np.int64)
    return trace, lengths
