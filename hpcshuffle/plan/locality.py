"""Locality-aware loading (Yang & Cong 2019, §V): global shuffling's batches from node-local caches.

Every rank draws the same global mini-batch sequence as global shuffling (the same seeded
permutation, dealt in the same steps). At step t each rank trains on the samples of global
batch t that its cache holds; ranks holding more than their share lend the surplus to ranks
holding less, paired by the heap algorithm (balance.py), so every local batch has exactly the
size global shuffling gives it. A lent sample travels for that one step only: caches never
change, and a sample no cache holds is read from shared storage by a rank that is short.

Theorem 1 of the paper: with the same global batches, synchronous SGD computes the same
gradient sums as global shuffling (only per-rank BatchNorm statistics differ).
"""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.balance import balance
from hpcshuffle.plan.common import EpochPlan, Loans, PlanSpec
from hpcshuffle.plan.global_ import plan_global


def holders(spec: PlanSpec, held: list[np.ndarray]) -> np.ndarray:
    """int64 (N,): the rank whose cache holds each sample, -1 where none does."""
    owner = np.full(spec.num_samples, -1, dtype=np.int64)
    for rank, ids in enumerate(held):
        owner[ids] = rank
    return owner


def plan_locality(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Assemble global shuffling's batches from what each rank holds; lend to even them out.

    A rank's local batch lists its own samples (in global-batch order), then the uncached ones
    it reads from shared storage, then what it borrows, in the order of the transfers.
    """
    ranks = spec.num_ranks
    owner = holders(spec, held)
    global_order = plan_global(spec, held, epoch).order
    orders: list[list[np.ndarray]] = [[] for _ in range(ranks)]
    loan_rows: list[tuple[int, int, int, int]] = []  # (step, src, dst, sample_id)
    reads_shared = [0] * ranks
    for step in range(spec.iterations):
        start, stop = spec.batch_bounds(step)
        batch = np.concatenate([order[start:stop] for order in global_order])
        batch_owner = owner[batch]
        local = [list(batch[batch_owner == rank]) for rank in range(ranks)]
        uncached = list(batch[batch_owner == -1])
        share = stop - start
        # uncached samples go to the ranks short of their share, largest shortfall first
        shared = [[] for _ in range(ranks)]
        for rank in np.argsort([len(ids) - share for ids in local], kind="stable"):
            take = max(0, share - len(local[rank]))
            shared[rank], uncached = uncached[:take], uncached[take:]
            reads_shared[rank] += len(shared[rank])
        counts = np.array([len(mine) + len(extra) for mine, extra in zip(local, shared)])
        borrowed = [[] for _ in range(ranks)]
        for src, dst, amount in balance(counts, np.full(ranks, share)):
            lent, local[src] = local[src][-amount:], local[src][:-amount]
            borrowed[dst] += lent
            loan_rows += [(step, src, dst, int(sample_id)) for sample_id in lent]
        for rank in range(ranks):
            orders[rank].append(np.array(local[rank] + shared[rank] + borrowed[rank], dtype=np.int64))
    loans = Loans(*np.array(loan_rows, dtype=np.int64).reshape(-1, 4).T)
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=held,
        order=[np.concatenate(steps) for steps in orders],
        loans=loans if len(loans.sample_id) else None,
        reads_shared=reads_shared,
    )

