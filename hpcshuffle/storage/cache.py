"""Cache policies for a rank whose future reads the plan fixes (Lobster §4.4, NoPFS, LRU).

The plan fixes, from the shared seed, every id a rank will train on, so the rank's *trace* (the
concatenation over epochs of `plan.order[rank]`) is known before training starts. A cache of
`capacity` samples in front of shared storage can therefore be planned offline:
`cache_sim.simulate` steps a policy of this module through the trace, one access at a time.

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

NO_EVICTION = -1


def as_trace(trace: np.ndarray) -> np.ndarray:
    """`trace` as int64 (n,) sample ids; a trace of another shape or dtype fails, saying which."""
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
    trace = as_trace(trace)
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
        """The future of `trace`, int64 (n,) sample ids in read order (ValueError for another shape or dtype)."""
        trace = as_trace(trace)
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
        """int64 (n,): the worth, at each position, of the sample read there after that read; the
        cache keeps the highest."""
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
    """The policy class named `name` (lru, nopfs, reuse_count, reuse_distance); ValueError otherwise."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown cache policy {name!r}; choose one of {sorted(POLICIES)}") from None
