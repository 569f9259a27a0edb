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

With shards (`PlanSpec.shard_samples` G > 1) a slot moves one whole shard instead of a sample
(plan/shards.py).
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
from hpcshuffle.plan.shards import shard_ids, whole_shards


def moves_per_rank(spec: PlanSpec) -> int:
    """k = ⌊q·⌊N/M⌋⌋, the same for every rank (per node, ⌊q·⌊N/nodes⌋⌋, when ranks share a node's
    partition).

    Rounding down (not to nearest) keeps the peak store ⌈N/M⌉ + k within ⌈(1+q)·N/M⌉; the
    epsilon absorbs float error such as 0.7 * 10 = 7.000000000000001 or 0.3 * 10 = 2.9999….
    """
    return int(np.floor(spec.q * spec.node_min_share + 1e-9))


def exchange_units(spec: PlanSpec, held: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """What can move, per rank (samples, or whole shards with `spec.shard_samples` G > 1), and the
    slots per epoch: k samples, or as many whole shards of G as fit in k and in every store."""
    budget, size = moves_per_rank(spec), spec.shard_samples
    if size == 1:
        return held, budget
    units = [whole_shards(ids, size, spec.num_samples) for ids in held]
    if 0 < budget < size:
        raise ValueError(
            f"a shard of {size} samples is more than the {budget} samples a node may move per epoch "
            f"(q = {spec.q:g} of its ⌊N/nodes⌋ = {spec.node_min_share}, the (1+q) storage budget), so nothing "
            "would ever move: pack smaller shards (hpcshuffle pack --shard-samples), raise shuffle.q, or use fewer workers"
        )
    # local rank j sends in slots j, j+R, ...: at most R·(its whole shards) + j slots
    per_node = spec.ranks_per_node
    fits = min(per_node * len(mine) + rank % per_node for rank, mine in enumerate(units))
    if budget and not fits:
        raise ValueError(
            f"rank {next(rank for rank, mine in enumerate(units) if not len(mine))} holds no whole shard of {size} "
            f"samples (a rank holds {spec.min_share}..{spec.max_share}), so it has nothing to exchange: pack smaller "
            "shards (hpcshuffle pack --shard-samples) or use fewer workers"
        )
    return units, min(budget // size, fits)


def plan_exchange(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> Exchange:
    """Algorithm 1 for `epoch`: the moves of `exchange_units`' slots, spread evenly over the I iterations.

    In each slot every node sends one unit (a sample, or a whole shard) of its local rank i mod R,
    picked at random from what that rank holds, to the same local rank of a node drawn by one
    random permutation of the nodes per slot; a node drawn as its own destination keeps the unit.
    Raises ValueError when whole shards cannot move (`exchange_units`).
    """
    units, slots = exchange_units(spec, held)
    nodes, per_node, size = spec.nodes, spec.ranks_per_node, spec.shard_samples
    pick_rng = epoch_rng(spec.seed, epoch, STREAM_PICK)
    # picked[n, i]: the sample (shard) node n sends in slot i, from the store of its local rank i mod R
    picked = np.empty((nodes, slots), np.int64)
    for rank, mine in enumerate(units):
        sends = picked[rank // per_node, rank % per_node :: per_node]
        sends[:] = pick_rng.permutation(mine)[: len(sends)]
    # dest[i, n]: where node n sends in slot i; one permutation of the nodes per slot
    dest = epoch_rng(spec.seed, epoch, STREAM_DEST).permuted(
        np.tile(np.arange(nodes), (slots, 1)), axis=1
    )
    slot = np.repeat(np.arange(slots), nodes)
    src_node = np.tile(np.arange(nodes), slots)
    dst_node = dest.reshape(-1)
    unit = picked.T.reshape(-1)
    local = slot % per_node  # sender and receiver: local rank i mod R of their nodes
    # spread the slots evenly over the I iterations: ≈ k/I = q·b moves per iteration
    iteration = (slot * spec.iterations) // max(slots, 1)
    # a node drawn as its own destination keeps the sample: no message, nothing to delete.
    # Dropping fixed points of a permutation keeps sends == receives on every node.
    moved = src_node != dst_node
    # one row per moved sample: a shard's G samples travel in the same slot, to the same rank
    rows = np.repeat(np.flatnonzero(moved), size)
    return Exchange(
        slots=slots,
        slot=slot[rows],
        src=src_node[rows] * per_node + local[rows],
        dst=dst_node[rows] * per_node + local[rows],
        sample_id=unit[moved] if size == 1 else shard_ids(unit[moved], size),
        iteration=iteration[rows],
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
