"""Partial local shuffling (PLS): every epoch each rank sends a fraction q of its partition away.

Algorithm 1 of Nguyen et al. (2022): rank r draws a random permutation p of its samples and
moves p[0..k) out, k = ⌊q·⌊N/M⌋⌋. For move slot i all ranks draw the same permutation `dest`
of the ranks from the shared seed and rank r sends p[i] to dest[r], so every slot sends and
receives exactly one sample per rank: the exchange is balanced and partition sizes never change.

When the ranks of a node share its store (`PlanSpec.ranks_per_node` R > 1), the same algorithm
runs over nodes instead of ranks: k = ⌊q·⌊N/nodes⌋⌋ per node, and `dest` permutes the nodes.
Node n's sample for slot i comes from the store of its local rank i mod R (a random one of that
rank's samples) and goes to local rank i mod R of the destination node, so in every iteration
each rank of a node sends and receives its 1/R of the node's moves, and every rank's store keeps
its size. Nothing moves between the ranks of one node: they train on the node's samples dealt
afresh every epoch (common.local_orders).
"""

from __future__ import annotations

import numpy as np

from hpcshuffle.plan.common import (
    STREAM_DEST,
    STREAM_PICK,
    EpochPlan,
    Exchange,
    PlanSpec,
    epoch_rng,
    local_orders,
)


def moves_per_rank(spec: PlanSpec) -> int:
    """k = ⌊q·⌊N/M⌋⌋, the same for every rank (per node, ⌊q·⌊N/nodes⌋⌋, when ranks share a node's
    partition).

    Rounding down (not to nearest) keeps the peak store ⌈N/M⌉ + k within ⌈(1+q)·N/M⌉; the
    epsilon absorbs float error such as 0.7 * 10 = 7.000000000000001 or 0.3 * 10 = 2.9999….
    """
    return int(np.floor(spec.q * spec.node_min_share + 1e-9))


def plan_exchange(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> Exchange:
    slots = moves_per_rank(spec)
    nodes, per_node = spec.nodes, spec.ranks_per_node
    pick_rng = epoch_rng(spec.seed, epoch, STREAM_PICK)
    # picked[n, i]: the sample node n sends in slot i, from the store of its local rank i mod R
    picked = np.empty((nodes, slots), np.int64)
    for rank, ids in enumerate(held):
        mine = picked[rank // per_node, rank % per_node :: per_node]
        mine[:] = pick_rng.permutation(ids)[: len(mine)]
    # dest[i, n]: where node n sends in slot i; one permutation of the nodes per slot
    dest = epoch_rng(spec.seed, epoch, STREAM_DEST).permuted(
        np.tile(np.arange(nodes), (slots, 1)), axis=1
    )
    slot = np.repeat(np.arange(slots), nodes)
    src_node = np.tile(np.arange(nodes), slots)
    dst_node = dest.reshape(-1)
    sample_id = picked.T.reshape(-1)
    local = slot % per_node  # sender and receiver: local rank i mod R of their nodes
    # spread the slots evenly over the I iterations: ≈ k/I = q·b moves per iteration
    iteration = (slot * spec.iterations) // max(slots, 1)
    # a node drawn as its own destination keeps the sample: no message, nothing to delete.
    # Dropping fixed points of a permutation keeps sends == receives on every node.
    moved = src_node != dst_node
    return Exchange(
        slots=slots,
        slot=slot[moved],
        src=src_node[moved] * per_node + local[moved],
        dst=dst_node[moved] * per_node + local[moved],
        sample_id=sample_id[moved],
        iteration=iteration[moved],
    )


def plan_partial(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Train on `held` locally shuffled while q·⌊N/M⌋ samples per rank move for the next epoch.

    With q = 0 this is exactly `plan_local` (same orders, no exchange).
    """
    exchange = plan_exchange(spec, held, epoch)
    return EpochPlan(
        spec=spec,
        epoch=epoch,
        held=held,
        order=local_orders(spec, held, epoch),
        exchange=exchange if exchange.slots else None,
        reads_shared=[0] * spec.num_ranks,
    )
