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

    When the ranks of a node share its stores (`spec.ranks_per_node` R > 1) the same is done per
    node: a node's batch is the samples of the global batch its stores hold, uncached ones and
    borrowed ones, R times a rank's share, dealt to its ranks in that order. Only nodes lend to
    each other, the rank whose store holds a sample to the rank it is dealt to.
    """
    per_node, nodes = spec.ranks_per_node, spec.nodes
    holder = holders(spec, held)
    node_of = np.where(holder >= 0, holder // per_node, -1)
    global_order = plan_global(spec, held, epoch).order
    orders: list[list[np.ndarray]] = [[] for _ in range(spec.num_ranks)]
    loan_rows: list[tuple[int, int, int, int]] = []  # (step, src rank, dst rank, sample_id)
    reads_shared = [0] * spec.num_ranks
    for step in range(spec.iterations):
        start, stop = spec.batch_bounds(step)
        batch = np.concatenate([order[start:stop] for order in global_order])
        batch_node = node_of[batch]
        local = [list(batch[batch_node == node]) for node in range(nodes)]
        uncached = list(batch[batch_node == -1])
        share = stop - start  # per rank; a node trains R times as many
        # uncached samples go to the nodes short of their share, largest shortfall first
        shared = [[] for _ in range(nodes)]
        for node in np.argsort([len(ids) - per_node * share for ids in local], kind="stable"):
            take = max(0, per_node * share - len(local[node]))
            shared[node], uncached = uncached[:take], uncached[take:]
        counts = np.array([len(mine) + len(extra) for mine, extra in zip(local, shared)])
        borrowed = [[] for _ in range(nodes)]
        lent_to: list[tuple[int, int]] = []  # (dst node, sample_id), in the order of the transfers
        for src, dst, amount in balance(counts, np.full(nodes, per_node * share)):
            lent, local[src] = local[src][-amount:], local[src][:-amount]
            borrowed[dst] += lent
            lent_to += [(dst, int(sample_id)) for sample_id in lent]
        receivers: list[list[int]] = []  # per node, the rank each of its borrowed samples is dealt to
        for node in range(nodes):
            batch_of_node = local[node] + shared[node] + borrowed[node]
            first_shared, first_borrowed = len(local[node]), len(local[node]) + len(shared[node])
            for index, rank in enumerate(spec.node_ranks(node)):
                begin, end = index * share, (index + 1) * share
                orders[rank].append(np.array(batch_of_node[begin:end], dtype=np.int64))
                reads_shared[rank] += max(0, min(end, first_borrowed) - max(begin, first_shared))
            receivers.append([spec.node_ranks(node)[(first_borrowed + i) // share] for i in range(len(borrowed[node]))])
        next_receiver = [iter(ranks) for ranks in receivers]
        loan_rows += [(step, int(holder[sample_id]), next(next_receiver[dst]), sample_id) for dst, sample_id in lent_to]
    loans = Loans(*np.array(loan_rows, dtype=np.int64).reshape(-1, 4).T)
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=held,
        order=[np.concatenate(steps) for steps in orders],
        loans=loans if len(loans.sample_id) else None,
        reads_shared=reads_shared,
    )
