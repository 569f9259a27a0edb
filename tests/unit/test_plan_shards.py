"""Shard plans (hpcshuffle/plan/shards.py): whole shards partitioned and exchanged, exact sample
balance kept, and the shuffle buffer's order."""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.analysis.quality import PairMixing
from hpcshuffle.plan import PlanSpec, initial_partition, plan_epochs
from hpcshuffle.plan.shards import buffered_order, dealt_ids, shard_ids, whole_shards


def test_dealt_ids_lay_whole_shards_end_to_end():
    ids = dealt_ids(10, 3, np.random.default_rng(0))  # shards [0 1 2] [3 4 5] [6 7 8] [9]
    assert sorted(ids.tolist()) == list(range(10))
    position = np.argsort(ids)
    for shard in ([0, 1, 2], [3, 4, 5], [6, 7, 8]):  # each shard's ids stay together, in order
        assert np.diff(position[shard]).tolist() == [1, 1]
    assert ids.tolist() != list(range(10))
    assert dealt_ids(10, 3, None).tolist() == list(range(10))


def test_whole_shards_leave_out_fragments_and_the_short_last_shard():
    ids = np.array([0, 1, 2, 4, 5, 9])  # shard 0 whole, shard 1 a fragment, shard 3 = [9] short
    assert whole_shards(ids, 3, 10).tolist() == [0]
    assert shard_ids(np.array([2, 0]), 3).tolist() == [6, 7, 8, 0, 1, 2]


@pytest.mark.parametrize(("n", "m", "r", "g"), [(1000, 4, 1, 20), (1003, 6, 2, 17), (640, 8, 4, 8)])
def test_shard_partition_is_exact_with_at_most_two_fragments_per_rank(n, m, r, g):
    spec = PlanSpec(n, m, 4, seed=2, ranks_per_node=r, shard_samples=g)
    held = initial_partition(spec)
    assert sorted(np.concatenate(held).tolist()) == list(range(n))
    assert {len(ids) for ids in held} <= {n // m, -(-n // m)}  # as exact as a sample partition
    for ids in held:
        touched = np.unique(ids // g)
        assert len(touched) - len(whole_shards(ids, g, n)) <= 2


@pytest.mark.parametrize(("n", "m", "r", "g", "q"), [(1000, 4, 1, 20, 0.3), (1003, 6, 2, 17, 0.5), (640, 8, 4, 8, 1.0)])
def test_shard_exchange_moves_whole_shards_and_keeps_every_store_its_size(n, m, r, g, q):
    spec = PlanSpec(n, m, 5, q=q, seed=4, ranks_per_node=r, shard_samples=g)
    sizes = [len(ids) for ids in initial_partition(spec)]
    budget = int(q * (n // (m // r)) + 1e-9)
    for plan in plan_epochs(spec, "partial", 4):
        assert sorted(np.concatenate(plan.held).tolist()) == list(range(n))
        assert [len(ids) for ids in plan.held] == sizes
        moves = plan.exchange
        assert moves is not None and 0 < moves.slots <= budget // g
        # a shard's g samples leave one store together, for one rank, in one iteration
        for column in (moves.sample_id // g, moves.src, moves.dst, moves.iteration, moves.slot):
            assert (column.reshape(-1, g) == column.reshape(-1, g)[:, :1]).all()
        assert (moves.sample_id.reshape(-1, g) % g == np.arange(g)).all()
        assert all(sample in plan.held[src] for sample, src in zip(moves.sample_id, moves.src))
        assert (moves.src // r != moves.dst // r).all()
        nodes = m // r
        assert max(sum(plan.store_peak()[rank] for rank in range(node * r, (node + 1) * r))
                   for node in range(nodes)) <= spec.storage_bound()


def test_one_sample_shards_are_the_sample_plans():
    sample, shard = PlanSpec(211, 4, 5, q=0.3, seed=9), PlanSpec(211, 4, 5, q=0.3, seed=9, shard_samples=1)
    for a, b in zip(plan_epochs(sample, "partial", 3), plan_epochs(shard, "partial", 3)):
        assert [ids.tolist() for ids in a.held] == [ids.tolist() for ids in b.held]
        assert [ids.tolist() for ids in a.order] == [ids.tolist() for ids in b.order]
        assert a.exchange.sample_id.tolist() == b.exchange.sample_id.tolist()


def test_a_shard_larger_than_the_exchange_budget_is_named():
    spec = PlanSpec(1000, 4, 5, q=0.1, shard_samples=50)  # k = 25 samples per rank and epoch
    with pytest.raises(ValueError, match=r"a shard of 50 samples is more than the 25 samples a node may move per epoch "
                                         r"\(q = 0.1 of its ⌊N/nodes⌋ = 250.*pack smaller shards"):
        list(plan_epochs(spec, "partial", 1))
    assert next(plan_epochs(spec, "local", 1)).exchange is None  # nothing to move, nothing refused


def test_ranks_without_a_whole_shard_are_named():
    spec = PlanSpec(300, 4, 5, q=1.0, shard_samples=60, partition="contiguous")  # ranks of 75: [0,75) is 60 + 15
    with pytest.raises(ValueError, match="holds no whole shard of 60 samples"):
        list(plan_epochs(spec, "partial", 1))


@pytest.mark.parametrize(("buffer", "g"), [(0, 1), (-1, 1), (0, 0)])
def test_spec_rejects_bad_shard_settings(buffer, g):
    if buffer == 0 and g == 1:
        PlanSpec(100, 2, 5, shard_samples=g, shuffle_buffer=buffer)
        return
    message = f"the shuffle buffer must be >= 0, got {buffer}" if g >= 1 else f"samples per shard must be >= 1, got {g}"
    with pytest.raises(ValueError, match=message):
        PlanSpec(100, 2, 5, shard_samples=g, shuffle_buffer=buffer)


def test_a_one_sample_buffer_reads_shard_after_shard():
    ids = np.array([3, 4, 5, 6, 7, 8, 12, 13])  # shards of 3: [3 4 5] [6 7 8] [12 13] (a fragment)
    order = buffered_order(ids, 3, 1, np.random.default_rng(1))
    position = np.argsort(order)  # ids 3..8 are at indices 0..5 of `ids`, 12 and 13 at 6 and 7
    for shard in ([0, 1, 2], [3, 4, 5], [6, 7]):
        assert (np.diff(position[shard]) == 1).all()


def test_buffered_orders_are_permutations_and_a_larger_buffer_mixes_batches_more():
    """The buffer changes which samples meet in a batch, not which meet on a worker: pair mixing
    over the epoch's local batches (each batch a group) grows with it, worker-level mixing does not."""
    ids = np.arange(0, 400)
    for buffer in (1, 10, 100, 1000):
        assert sorted(buffered_order(ids, 20, buffer, np.random.default_rng(0)).tolist()) == ids.tolist()
    batch_quality, worker_quality = {}, {}
    for buffer in (1, 40, 0):
        spec = PlanSpec(2000, 4, 10, q=0.2, seed=0, shard_samples=25, shuffle_buffer=buffer)
        batches = PairMixing(2000, 4 * spec.iterations, seed=0)
        workers = PairMixing(2000, 4, seed=0)
        for plan in plan_epochs(spec, "partial", 3):
            groups = [order[start:stop] for start, stop in spec.steps_from(0) for order in plan.order]
            batch_quality[buffer] = batches.add_epoch(groups)["quality"]
            worker_quality[buffer] = workers.add_epoch(plan.order)["quality"]
    assert batch_quality[1] < batch_quality[40] < batch_quality[0]
    assert worker_quality[1] == worker_quality[40] == worker_quality[0]
