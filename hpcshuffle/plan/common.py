"""What every planner shares: the plan's data types, the initial partition and the local order.

A plan is a pure function of (num_samples, num_ranks, q, batch_size, seed, epoch) and of the
partition the ranks held at the start of the epoch. Every rank computes the same plan, so the
node-local stores are only caches of what the plan says a rank holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from hpcshuffle.errors import at_least
from hpcshuffle.plan.shards import buffered_order, dealt_ids
from hpcshuffle.plan.skew import parse_skew, skewed_order

# Sub-streams of the per-(seed, epoch) random generator, so that adding a draw in one place
# never changes the numbers drawn in another.
STREAM_PARTITION = 0
STREAM_ORDER = 1
STREAM_PICK = 2
STREAM_DEST = 3

# how the first partition is cut (storage.partition): a seeded random split, consecutive id
# ranges, which is what a naive stager gives when it hands each node a range of a listing sorted
# by class (ImageFolder's ids run class by class), or a label-skewed split (plan/skew.py)
RANDOM, CONTIGUOUS = "random", "contiguous"
PARTITIONS = (RANDOM, CONTIGUOUS, "dirichlet-<α>", "classes_per_worker-<k>")


def check_partition(partition: str) -> str:
    """`partition` if it names a first partition (PARTITIONS); else ValueError naming the choices."""
    if partition not in (RANDOM, CONTIGUOUS) and parse_skew(partition) is None:
        raise ValueError(f"storage.partition must be one of {', '.join(PARTITIONS)}, got {partition!r}: random cuts "
                         "a seeded shuffle of the ids, contiguous consecutive id ranges, dirichlet-α and "
                         "classes_per_worker-k label-skewed splits (e.g. dirichlet-0.1, classes_per_worker-2)")
    return partition

# where a rank gets the sample at a position of its epoch order (`EpochPlan.sources`); a data
# path may serve FROM_SHARED from a closer copy (a node replica, a planned cache)
FROM_STORE, FROM_SHARED, FROM_LOAN = 0, 1, 2


@dataclass(frozen=True)
class PlanSpec:
    """The inputs every rank must agree on.

    Args:
        num_samples: N, samples in the training set (ids 0..N-1).
        num_ranks: M, data-parallel workers.
        batch_size: b, samples per rank per iteration.
        q: fraction of a partition exchanged per epoch (partial shuffling only).
        seed: the shared seed; the same seed gives the same plan on every rank and run.
        ranks_per_node: R, ranks sharing one node's store (storage.scope=node); 1 is rank scope.
            Ranks r with the same r // R are one node: the partition is a node's, dealt afresh to
            its ranks every epoch, and only moves between nodes are planned. With R = 1 every
            plan is exactly the rank-scope plan.
        partition: how the epoch-0 partition is cut, one of PARTITIONS (`initial_partition`).
        shard_samples: G, samples per shard of a packed dataset (shard j is ids [jG, (j+1)G));
            G > 1 partitions and exchanges whole shards (plan/shards.py); 1 plans single samples.
        shuffle_buffer: B, samples in the shuffle buffer through which a node reads its shards
            each epoch (plan/shards.py); 0 shuffles everything the node holds.
        labels: per sample id, its class; only a label-skewed partition (plan/skew.py) reads them.
    """

    num_samples: int
    num_ranks: int
    batch_size: int
    q: float = 0.0
    seed: int = 0
    ranks_per_node: int = 1
    partition: str = RANDOM
    shard_samples: int = 1
    shuffle_buffer: int = 0
    labels: Sequence[int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        at_least("samples per shard", self.shard_samples)
        at_least("the shuffle buffer", self.shuffle_buffer, 0)
        if parse_skew(check_partition(self.partition)):
            if self.labels is None or len(self.labels) != self.num_samples:
                have = "none" if self.labels is None else f"{len(self.labels)}"
                raise ValueError(f"storage.partition={self.partition} splits by class, so the plan needs the class "
                                 f"of each of the {self.num_samples} samples, but it was given {have}: train on a "
                                 "dataset whose listing holds one class a sample (not deepcam or packed_h5), give "
                                 "`hpcshuffle plan` --classes, --label-counts or --dataset, or use a random or "
                                 "contiguous partition")
            if self.shard_samples > 1:
                raise ValueError(f"storage.partition={self.partition} splits single samples by class; whole shards "
                                 "mix classes: use shuffle.unit=sample, or a random or contiguous partition")
        at_least("workers", self.num_ranks)
        if self.ranks_per_node < 1 or self.num_ranks % self.ranks_per_node:
            raise ValueError(
                f"{self.num_ranks} workers cannot be split into nodes of {self.ranks_per_node} ranks; "
                "every node needs the same number of ranks: pick a number of ranks per node that divides the workers"
            )
        if self.num_samples < self.num_ranks:
            raise ValueError(
                f"more workers ({self.num_ranks}) than samples ({self.num_samples}): "
                "every worker needs at least one sample; use fewer workers or more data"
            )
        if not 0.0 <= self.q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {self.q}")
        at_least("batch size", self.batch_size)
        if self.batch_size > self.min_share:
            raise ValueError(
                f"batch size {self.batch_size} is larger than a worker's share "
                f"⌊N/M⌋ = ⌊{self.num_samples}/{self.num_ranks}⌋ = {self.min_share}; "
                "lower the batch size or use fewer workers"
            )

    @property
    def min_share(self) -> int:
        """⌊N/M⌋: the smallest partition a rank holds."""
        return self.num_samples // self.num_ranks

    @property
    def max_share(self) -> int:
        """⌈N/M⌉: the largest partition; every rank trains on this many samples per epoch."""
        return -(-self.num_samples // self.num_ranks)

    @property
    def nodes(self) -> int:
        """Nodes, each holding one partition in its ranks' stores (M in rank scope)."""
        return self.num_ranks // self.ranks_per_node

    @property
    def node_min_share(self) -> int:
        """⌊N/nodes⌋: the smallest partition a node holds (⌊N/M⌋ in rank scope)."""
        return self.num_samples // self.nodes

    def node_of(self, rank: int) -> int:
        """The node whose store `rank` shares (`rank // ranks_per_node`; the rank itself in rank scope)."""
        return rank // self.ranks_per_node

    def node_ranks(self, node: int) -> range:
        """The ranks of `node`."""
        return range(node * self.ranks_per_node, (node + 1) * self.ranks_per_node)

    @property
    def iterations(self) -> int:
        """I: iterations per epoch, the same on every rank (the last batch may be short)."""
        return -(-self.max_share // self.batch_size)

    def storage_bound(self) -> int:
        """⌈(1+q)·N/nodes⌉, the paper's storage bound per rank (per node when ranks share a node's
        store), exact for the q as written (0.1, not 0.1000…01)."""
        return math.ceil((1 + Fraction(repr(self.q))) * Fraction(self.num_samples, self.nodes))

    def storage_headroom(self) -> float:
        """The bound's room above the largest partition, as a fraction of it:
        ⌈(1+q)·N/nodes⌉ / ⌈N/nodes⌉ − 1."""
        return self.storage_bound() / -(-self.num_samples // self.nodes) - 1.0

    def batch_bounds(self, iteration: int) -> tuple[int, int]:
        """Positions [start, stop) of `iteration`'s batch in a rank's epoch order."""
        start = iteration * self.batch_size
        return start, min(start + self.batch_size, self.max_share)

    def step_of(self, first_step: int) -> np.ndarray:
        """int64: the step of every position of a rank's order from step `first_step` on."""
        steps = np.arange(first_step, self.iterations)
        return np.repeat(steps, [stop - start for start, stop in self.steps_from(first_step)])

    def steps_from(self, first_step: int) -> list[tuple[int, int]]:
        """`batch_bounds` of every step from `first_step` to the epoch's end."""
        return [self.batch_bounds(step) for step in range(first_step, self.iterations)]


@dataclass(frozen=True)
class Exchange:
    """The sample moves of one epoch (Algorithm 1), one row per moved sample.

    Slot i is one permutation of the ranks: each rank sends one sample and receives one, except
    a rank drawn as its own destination, which keeps its sample (that row is left out). So every
    rank sends as many samples as it receives, at most `slots`. Arrays have shape (moves,), int64.
    """

    slots: int
    slot: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sample_id: np.ndarray
    iteration: np.ndarray  # iteration during which the move is posted, ≈ q·b moves per iteration

    def sends_of(self, rank: int) -> np.ndarray:
        """Row indices of the moves `rank` sends, in slot order."""
        return np.flatnonzero(self.src == rank)

    def receives_of(self, rank: int) -> np.ndarray:
        """Row indices of the moves `rank` receives, in slot order."""
        return np.flatnonzero(self.dst == rank)


@dataclass(frozen=True)
class Loans:
    """Samples lent for one step (locality-aware loading), one row per sample; arrays int64 (loans,).

    Unlike an `Exchange`, nothing changes hands: the borrower trains on the sample at `step`
    and drops it, the lender keeps it in its store.
    """

    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sample_id: np.ndarray

    def lends_of(self, rank: int) -> np.ndarray:
        """Row indices of what `rank` lends, by step."""
        return np.flatnonzero(self.src == rank)

    def borrows_of(self, rank: int) -> np.ndarray:
        """Row indices of what `rank` borrows, by step."""
        return np.flatnonzero(self.dst == rank)

    def lent_per_step(self, rank: int, iterations: int) -> np.ndarray:
        """int64 (iterations,): how many samples `rank` lends at each step."""
        return np.bincount(self.step[self.src == rank], minlength=iterations)


@dataclass(frozen=True)
class EpochPlan:
    """Who holds, trains on, sends and receives what during one epoch.

    Attributes:
        epoch: the epoch number, from 0.
        held: per rank, the sorted ids in its node-local store at the epoch's start
            (empty for global shuffling, which reads shared storage). With ranks sharing a
            node's store, a rank's store is its share of the node's: any rank of the node
            may train on it (`node_held`), and only its holder sends it.
        order: per rank, the ids it trains on, in order; all of length ⌈N/M⌉.
        exchange: the moves carried out during this epoch (None if nothing moves).
        loans: samples lent for a single step (locality-aware loading; None otherwise).
        reads_shared: per rank, samples read from shared storage during the epoch.
    """

    spec: PlanSpec
    epoch: int
    held: list[np.ndarray]
    order: list[np.ndarray]
    exchange: Exchange | None = None
    loans: Loans | None = None
    reads_shared: list[int] = field(default_factory=list)

    def next_held(self) -> list[np.ndarray]:
        """The partition at the next epoch's start: held − sent + received."""
        if self.exchange is None:
            return self.held
        moves = self.exchange
        result = []
        for rank, ids in enumerate(self.held):
            sent = moves.sample_id[moves.src == rank]
            received = moves.sample_id[moves.dst == rank]
            result.append(np.sort(np.concatenate([np.setdiff1d(ids, sent), received])))
        return result

    def node_held(self, rank: int) -> np.ndarray:
        """The sorted ids the stores of `rank`'s node hold at the epoch's start (its own in rank scope)."""
        return node_union(self.spec, self.held, self.spec.node_of(rank))

    def homes(self, rank: int) -> np.ndarray:
        """int64 (⌈N/M⌉,): per position of `rank`'s order, which of its node's ranks holds the
        sample (0 .. R-1, the local rank), -1 where none does."""
        local = np.full(self.spec.num_samples, -1, dtype=np.int64)
        for index, peer in enumerate(self.spec.node_ranks(self.spec.node_of(rank))):
            local[self.held[peer]] = index
        return local[self.order[rank]]

    def sources(self, rank: int) -> np.ndarray:
        """int8 (⌈N/M⌉,): per position of `rank`'s order, FROM_STORE, FROM_SHARED or FROM_LOAN.

        A sample its node holds comes from a store of the node, one it borrows for a step from a peer (a
        step's borrowed samples close its local batch, see plan/locality.py), any other from
        shared storage.
        """
        order = self.order[rank]
        sources = np.where(np.isin(order, self.node_held(rank)), FROM_STORE, FROM_SHARED).astype(np.int8)
        if self.loans is not None:
            borrowed_per_step = np.bincount(self.loans.step[self.loans.dst == rank], minlength=self.spec.iterations)
            for step in np.flatnonzero(borrowed_per_step):
                _, stop = self.spec.batch_bounds(step)
                sources[stop - borrowed_per_step[step] : stop] = FROM_LOAN
        return sources

    def store_peak(self) -> list[int]:
        """Per rank, the most samples in its store during the epoch (received before sent are deleted)."""
        received = [0] * self.spec.num_ranks
        if self.exchange is not None:
            received = np.bincount(self.exchange.dst, minlength=self.spec.num_ranks).tolist()
        return [len(ids) + extra for ids, extra in zip(self.held, received)]

    def sent_counts(self) -> list[int]:
        """Per rank, samples sent to peers during the epoch (moved or lent)."""
        return self._per_rank("src")

    def received_counts(self) -> list[int]:
        """Per rank, samples received from peers during the epoch (moved or borrowed)."""
        return self._per_rank("dst")

    def _per_rank(self, column: str) -> list[int]:
        total = np.zeros(self.spec.num_ranks, dtype=np.int64)
        for transfers in (self.exchange, self.loans):
            if transfers is not None:
                total += np.bincount(getattr(transfers, column), minlength=self.spec.num_ranks)
        return total.tolist()


def epoch_rng(seed: int, epoch: int, stream: int) -> np.random.Generator:
    """The generator for one (seed, epoch, purpose); independent of every other draw."""
    return np.random.default_rng([seed, epoch, stream])


def initial_partition(spec: PlanSpec) -> list[np.ndarray]:
    """Split a seeded permutation of 0..N-1 (CONTIGUOUS: 0..N-1 in order; a label-skewed partition:
    plan/skew.py's order) into one part per node, then each node's part into one per rank; parts of
    one level differ in size by at most 1. Returns the ranks' sorted parts."""
    if spec.partition == CONTIGUOUS:
        ids = np.arange(spec.num_samples, dtype=np.int64)
    elif spec.partition != RANDOM:
        ids = skewed_order(spec.partition, spec.labels, spec.nodes, epoch_rng(spec.seed, 0, STREAM_PARTITION))
    elif spec.shard_samples > 1:  # whole shards in a random order, cut into runs like the ids
        ids = dealt_ids(spec.num_samples, spec.shard_samples, epoch_rng(spec.seed, 0, STREAM_PARTITION))
    else:
        ids = epoch_rng(spec.seed, 0, STREAM_PARTITION).permutation(spec.num_samples)
    return [
        np.sort(part)
        for node_part in np.array_split(ids, spec.nodes)
        for part in np.array_split(node_part, spec.ranks_per_node)
    ]


def node_union(spec: PlanSpec, held: list[np.ndarray], node: int) -> np.ndarray:
    """The sorted ids the ranks of `node` hold together."""
    return np.sort(np.concatenate([held[rank] for rank in spec.node_ranks(node)]))


def from_shared(spec: PlanSpec, epoch: int, orders: np.ndarray) -> EpochPlan:
    """The plan of a strategy that reads every sample from shared storage: rank r trains on `orders[r]`
    (int64 (M, ⌈N/M⌉)) and holds nothing."""
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=[np.empty(0, dtype=np.int64) for _ in range(spec.num_ranks)],
        order=list(orders),
        reads_shared=[spec.max_share] * spec.num_ranks,
    )


def dealt_from_shared(spec: PlanSpec, epoch: int, stream: np.ndarray) -> EpochPlan:
    """`from_shared` of `stream` (every id once), padded to M·⌈N/M⌉ like DistributedSampler and dealt to
    the ranks in contiguous runs."""
    padded = pad_to(stream, spec.num_ranks * spec.max_share)
    return from_shared(spec, epoch, padded.reshape(spec.num_ranks, spec.max_share))


def pad_to(ids: np.ndarray, length: int) -> np.ndarray:
    """Repeat the first ids so that every rank runs the same number of iterations.

    A rank holding ⌊N/M⌋ samples trains one of them twice; no sample is skipped.
    """
    if len(ids) == 0:
        raise ValueError("cannot pad an empty order")
    repeats = -(-length // len(ids))
    return np.tile(ids, repeats)[:length]


def local_orders(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> list[np.ndarray]:
    """Each rank's share of a fresh shuffle of what its node holds, ⌈N/M⌉ ids each.

    A node's ids are shuffled (with a shuffle buffer, read shard by shard through it:
    shards.buffered_order), padded to R·⌈N/M⌉ and dealt in R consecutive runs, so every epoch
    mixes the whole node's partition across its ranks at no network cost. In rank scope (R = 1)
    this is each rank's shuffle of its own partition.
    """
    rng = epoch_rng(spec.seed, epoch, STREAM_ORDER)
    ranks_per_node, share = spec.ranks_per_node, spec.max_share

    def shuffled(ids: np.ndarray) -> np.ndarray:
        if spec.shuffle_buffer:
            return buffered_order(ids, spec.shard_samples, spec.shuffle_buffer, rng)
        return rng.permutation(ids)

    return [
        dealt
        for node in range(spec.nodes)
        for dealt in pad_to(shuffled(node_union(spec, held, node)), ranks_per_node * share).reshape(
            ranks_per_node, share
        )
    ]
