"""What each rank reads, sends and borrows at each iteration of one epoch, from the real plan.

The simulation replays `hpcshuffle.plan`'s epoch, not an average: per (rank, iteration) the
samples read from the node-local store and from shared storage, the exchange messages (one per
destination: what a rank sends one peer in one iteration travels together) and the loans a rank
borrows for that step. Everything is vectorised so ImageNet-1K at M = 4,096 takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcshuffle.plan import (
    FROM_SHARED,
    FROM_STORE,
    EpochPlan,
    PlanSpec,
    get_strategy,
    plan_epochs,
)


@dataclass(frozen=True)
class Transfers:
    """Coalesced transfers, one row per (owner rank, iteration, peer); int64 arrays sorted by owner.

    For exchange sends the owner is the sender and the peer the receiver; for loans the owner is
    the borrower (who waits for them before its step) and the peer the lender.
    """

    owner: np.ndarray
    iteration: np.ndarray
    peer: np.ndarray
    samples: np.ndarray

    @classmethod
    def coalesce(cls, owner: np.ndarray, iteration: np.ndarray, peer: np.ndarray, ranks: int,
                 iterations: int) -> Transfers:
        """One row per distinct (owner, iteration, peer) of per-sample moves, `samples` counting each."""
        key = (owner * iterations + iteration) * ranks + peer
        unique, counts = np.unique(key, return_counts=True)
        return cls(owner=unique // (iterations * ranks), iteration=(unique // ranks) % iterations,
                   peer=unique % ranks, samples=counts)

    @classmethod
    def empty(cls) -> Transfers:
        """No transfers."""
        nothing = np.empty(0, dtype=np.int64)
        return cls(nothing, nothing, nothing, nothing)

    def of(self, rank: int) -> dict[int, list[tuple[int, int]]]:
        """`rank`'s rows as {iteration: [(peer, samples), ...]}."""
        lo, hi = np.searchsorted(self.owner, [rank, rank + 1])
        rows: dict[int, list[tuple[int, int]]] = {}
        for iteration, peer, samples in zip(self.iteration[lo:hi].tolist(), self.peer[lo:hi].tolist(),
                                            self.samples[lo:hi].tolist()):
            rows.setdefault(iteration, []).append((peer, samples))
        return rows

    def total(self) -> int:
        """Samples moved, over all rows."""
        return int(self.samples.sum())


@dataclass(frozen=True)
class EpochTraffic:
    """One epoch's traffic. `local_reads` / `shared_reads`: int64 (M, I) samples per rank and iteration."""

    spec: PlanSpec
    shuffle: str
    local_reads: np.ndarray
    shared_reads: np.ndarray
    sends: Transfers
    loans: Transfers

    @property
    def iterations(self) -> int:
        """I, iterations per epoch."""
        return self.spec.iterations


def epoch_traffic(spec: PlanSpec, shuffle: str, epoch: int = 0) -> EpochTraffic:
    """The traffic of `epoch` of a run of `shuffle` (the plan's history replayed from epoch 0)."""
    get_strategy(shuffle)
    plan = list(plan_epochs(spec, shuffle, epoch + 1, start_epoch=epoch))[0]
    return traffic_of(plan, shuffle)


def traffic_of(plan: EpochPlan, shuffle: str) -> EpochTraffic:
    """What `plan` moves and reads: per rank and iteration the samples read locally and from shared
    storage, the exchange's sends and the loans, coalesced."""
    spec = plan.spec
    ranks, iterations = spec.num_ranks, spec.iterations
    step = spec.step_of(0)
    local = np.zeros((ranks, iterations), dtype=np.int64)
    shared = np.zeros((ranks, iterations), dtype=np.int64)
    for rank in range(ranks):
        sources = plan.sources(rank)
        local[rank] = np.bincount(step[sources == FROM_STORE], minlength=iterations)
        shared[rank] = np.bincount(step[sources == FROM_SHARED], minlength=iterations)
    sends = loans = Transfers.empty()
    if plan.exchange is not None:
        moves = plan.exchange
        sends = Transfers.coalesce(moves.src, moves.iteration, moves.dst, ranks, iterations)
    if plan.loans is not None:
        lent = plan.loans
        loans = Transfers.coalesce(lent.dst, lent.step, lent.src, ranks, iterations)
    return EpochTraffic(spec, shuffle, local, shared, sends, loans)
