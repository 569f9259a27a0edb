"""Example-based checks of the planners: exact numbers for known shapes, and the spec's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcshuffle.plan import (
    PlanSpec,
    get_strategy,
    initial_partition,
    moves_per_rank,
    plan_epochs,
)
from hpcshuffle.plan.common import pad_to


def as_lists(arrays):
    return [a.tolist() for a in arrays]


# -- partial with q = 0 is local shuffling ------------------------------------------------------


@pytest.mark.parametrize("n, m, b, seed", [(103, 4, 5, 0), (64, 8, 8, 7), (1000, 3, 17, 12345)])
def test_partial_q0_equals_local(n, m, b, seed):
    spec = PlanSpec(n, m, b, q=0.0, seed=seed)
    local = list(plan_epochs(spec, "local", 5))
    partial = list(plan_epochs(spec, "partial", 5))
    for lp, pp in zip(local, partial, strict=True):
        assert pp.exchange is None
        assert as_lists(pp.held) == as_lists(lp.held)
        assert as_lists(pp.order) == as_lists(lp.order)
        assert pp.sent_counts() == pp.received_counts() == [0] * m
        assert pp.store_peak() == [len(ids) for ids in lp.held]


def test_partial_with_q_too_small_for_one_move_has_no_exchange():
    # q·⌊N/M⌋ = 0.03·25 = 0.75 → k = 0: nothing moves, like local
    spec = PlanSpec(103, 4, 5, q=0.03, seed=1)
    plans = list(plan_epochs(spec, "partial", 3))
    assert moves_per_rank(spec) == 0
    assert all(p.exchange is None for p in plans)
    assert as_lists(plans[0].held) == as_lists(plans[2].held)


# -- moves per rank ----------------------------------------------------------------------------


def test_moves_per_rank_q03_n103_m4():
    spec = PlanSpec(103, 4, 5, q=0.3, seed=0)
    assert spec.min_share == 25 and spec.max_share == 26
    assert moves_per_rank(spec) == 7  # ⌊0.3·25⌋ = ⌊7.5⌋
    plan = next(plan_epochs(spec, "partial", 1))
    ex = plan.exchange
    assert ex is not None and ex.slots == 7
    assert sorted(set(ex.slot.tolist())) <= list(range(7))
    # a rank sends at most one sample per slot, so at most 7 in all, and receives as many
    assert max(plan.sent_counts()) <= 7
    assert plan.sent_counts() == plan.received_counts()
    # rows a rank keeps (drawn as its own destination) are left out: 4·7 slots minus fixed points
    assert len(ex.src) <= 4 * 7
    assert sum(plan.sent_counts()) == len(ex.src)
    for rank in range(4):
        assert np.all(ex.src[ex.sends_of(rank)] == rank)
        assert np.all(ex.dst[ex.receives_of(rank)] == rank)
        # in slot order
        assert np.all(np.diff(ex.slot[ex.sends_of(rank)]) > 0)


@pytest.mark.parametrize(
    "q, n, m, expected",
    [
        (0.3, 103, 4, 7),
        (0.7, 10, 1, 7),  # 0.7 * 10 == 7.000000000000001 in floats
        (0.3, 10, 1, 3),
        (0.1, 100, 10, 1),
        (0.29, 100, 1, 29),  # 0.29 * 100 == 28.999999999999996 in floats
        (0.57, 100, 1, 57),  # 0.57 * 100 == 56.99999999999999
        (1.0, 103, 4, 25),
        (0.0, 103, 4, 0),
        (0.999, 1000, 1, 999),
    ],
)
def test_moves_per_rank_is_floor_of_decimal_q(q, n, m, expected):
    spec = PlanSpec(n, m, 1, q=q)
    assert moves_per_rank(spec) == expected


def test_exchange_spread_over_epoch():
    # N=1000, M=4, b=10: ⌈N/M⌉ = 250, I = 25 iterations; q=0.5 → k = 125 slots, q·b = 5 per iteration
    spec = PlanSpec(1000, 4, 10, q=0.5, seed=3)
    assert spec.iterations == 25
    k = moves_per_rank(spec)
    assert k == 125
    for plan in plan_epochs(spec, "partial", 3):
        ex = plan.exchange
        assert np.all((ex.iteration >= 0) & (ex.iteration < spec.iterations))
        # k/I = 5 slots per iteration, in slot order: slots 5j..5j+4 are posted in iteration j.
        # (A slot can vanish entirely when its permutation of the 4 ranks is the identity, so
        # count slots through the mapping, not through the rows present.)
        np.testing.assert_array_equal(ex.iteration, ex.slot // 5)
        slots_per_iteration = np.bincount(np.unique(ex.slot) // 5, minlength=spec.iterations)
        assert slots_per_iteration.max() <= 5
        # every iteration carries moves, first and last included: not front-loaded
        assert set(ex.iteration.tolist()) == set(range(spec.iterations))
        for rank in range(4):
            per_iteration = np.bincount(ex.iteration[ex.src == rank], minlength=spec.iterations)
            assert per_iteration.max() <= math.ceil(k / spec.iterations) + 1


@pytest.mark.parametrize("n, m, b, q", [(103, 4, 5, 0.3), (103, 4, 1, 0.3), (500, 7, 3, 0.05), (97, 2, 48, 1.0)])
def test_exchange_iterations_in_range_and_bounded(n, m, b, q):
    spec = PlanSpec(n, m, b, q=q, seed=11)
    k = moves_per_rank(spec)
    iters = spec.iterations
    for plan in plan_epochs(spec, "partial", 3):
        ex = plan.exchange
        assert ex is not None
        assert np.all((ex.iteration >= 0) & (ex.iteration < iters))
        # the slots used span the epoch: the first slot at iteration 0, the last in the last k/I
        all_slot_iters = (np.arange(k) * iters) // k
        assert all_slot_iters[0] == 0 and all_slot_iters[-1] >= iters - math.ceil(iters / k)
        for rank in range(m):
            per_iteration = np.bincount(ex.iteration[ex.src == rank], minlength=iters)
            assert per_iteration.max() <= math.ceil(k / iters) + 1


# -- local and global --------------------------------------------------------------------------


def test_local_keeps_partition_and_reshuffles_order():
    spec = PlanSpec(200, 4, 10, seed=5)
    plans = list(plan_epochs(spec, "local", 4))
    held0 = as_lists(plans[0].held)
    assert held0 == as_lists(initial_partition(spec))
    for plan in plans:
        assert as_lists(plan.held) == held0
        assert plan.exchange is None
        assert plan.reads_shared == [0, 0, 0, 0]
        assert plan.store_peak() == [50, 50, 50, 50]
    for before, after in zip(plans, plans[1:]):
        for rank in range(4):
            assert before.order[rank].tolist() != after.order[rank].tolist()
            assert sorted(before.order[rank].tolist()) == sorted(after.order[rank].tolist())


def test_contiguous_partition_is_consecutive_id_ranges_node_first():
    """10 ids, 2 nodes of 2 ranks: nodes get 0-4 and 5-9, their ranks 0-2, 3-4, 5-7, 8-9."""
    spec = PlanSpec(10, 4, 1, seed=3, ranks_per_node=2, partition="contiguous")
    assert as_lists(initial_partition(spec)) == [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9]]
    # the seed draws the orders, not the partition
    other = PlanSpec(10, 4, 1, seed=4, ranks_per_node=2, partition="contiguous")
    assert as_lists(initial_partition(other)) == as_lists(initial_partition(spec))
    assert as_lists(initial_partition(PlanSpec(10, 4, 1, seed=3))) != as_lists(initial_partition(spec))


def test_contiguous_local_shuffling_trains_each_rank_on_its_range_forever():
    spec = PlanSpec(100, 4, 5, seed=1, partition="contiguous")
    for plan in plan_epochs(spec, "local", 3):
        assert [sorted(order.tolist()) for order in plan.order] == [list(range(r * 25, (r + 1) * 25)) for r in range(4)]


def test_contiguous_partial_shuffling_spreads_the_ranges():
    spec = PlanSpec(100, 4, 5, q=0.4, seed=1, partition="contiguous")
    plans = list(plan_epochs(spec, "partial", 3))
    assert sorted(np.concatenate(plans[-1].held).tolist()) == list(range(100))  # nothing lost or duplicated
    foreign = [int(np.sum(ids // 25 != rank)) for rank, ids in enumerate(plans[-1].held)]
    assert all(count > 0 for count in foreign)


def test_spec_rejects_an_unknown_partition():
    with pytest.raises(ValueError, match=r"must be one of random, contiguous, dirichlet-<α>, classes_per_worker-<k>, "
                                         r"got 'sorted'"):
        PlanSpec(100, 4, 5, partition="sorted")


def test_local_order_pads_short_partition_with_one_repeat():
    spec = PlanSpec(10, 3, 1, seed=0)  # partitions 4, 3, 3; every rank trains on 4
    plan = next(plan_epochs(spec, "local", 1))
    assert [len(h) for h in plan.held] == [4, 3, 3]
    for order, held in zip(plan.order, plan.held):
        assert len(order) == 4
        assert set(order.tolist()) == set(held.tolist())
        if len(held) == 3:
            assert order[3] == order[0]  # pad_to repeats the head


def test_global_holds_nothing_and_reads_everything_from_shared():
    spec = PlanSpec(10, 3, 2, seed=9)
    plans = list(plan_epochs(spec, "global", 3))
    for plan in plans:
        assert as_lists(plan.held) == [[], [], []]
        assert plan.exchange is None
        assert plan.store_peak() == [0, 0, 0]
        assert plan.reads_shared == [4, 4, 4]
        flat = np.concatenate(plan.order).tolist()
        assert len(flat) == 12
        assert sorted(flat[:10]) == list(range(10))
        assert flat[10:] == flat[:2]  # DistributedSampler pads with the head of the permutation
        assert plan.next_held() is plan.held
    assert as_lists(plans[0].order) != as_lists(plans[1].order)


def test_pad_to():
    np.testing.assert_array_equal(pad_to(np.array([3, 1, 2]), 5), [3, 1, 2, 3, 1])
    np.testing.assert_array_equal(pad_to(np.array([3, 1, 2]), 3), [3, 1, 2])
    with pytest.raises(ValueError, match="empty"):
        pad_to(np.array([], dtype=np.int64), 2)


# -- replay ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", ["local", "partial", "global"])
def test_start_epoch_replays_history(shuffle):
    spec = PlanSpec(103, 4, 5, q=0.3 if shuffle == "partial" else {"local": 0.0, "global": 1.0}[shuffle], seed=2)
    full = list(plan_epochs(spec, shuffle, 4))
    resumed = list(plan_epochs(spec, shuffle, 4, start_epoch=2))
    assert [p.epoch for p in resumed] == [2, 3]
    for a, b in zip(full[2:], resumed, strict=True):
        assert as_lists(a.held) == as_lists(b.held)
        assert as_lists(a.order) == as_lists(b.order)
        assert (a.exchange is None) == (b.exchange is None)
        if a.exchange is not None:
            assert a.exchange.sample_id.tolist() == b.exchange.sample_id.tolist()
            assert a.exchange.dst.tolist() == b.exchange.dst.tolist()
    if shuffle == "partial":
        # the partition really evolves, so replay is not trivially the initial partition
        assert as_lists(full[2].held) != as_lists(full[0].held)


def test_start_epoch_at_end_yields_nothing():
    spec = PlanSpec(20, 2, 2, q=0.5)
    assert list(plan_epochs(spec, "partial", 3, start_epoch=3)) == []


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_spec_rejects_q_out_of_range(q):
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\]"):
        PlanSpec(100, 4, 5, q=q)


def test_spec_accepts_q_bounds():
    assert PlanSpec(100, 4, 5, q=0.0).q == 0.0
    assert PlanSpec(100, 4, 5, q=1.0).q == 1.0


def test_spec_rejects_more_workers_than_samples():
    with pytest.raises(ValueError) as err:
        PlanSpec(num_samples=5, num_ranks=8, batch_size=1)
    message = str(err.value)
    assert "8" in message and "5" in message
    assert "more workers" in message


def test_spec_rejects_no_workers():
    with pytest.raises(ValueError, match="workers must be >= 1"):
        PlanSpec(10, 0, 1)


def test_spec_rejects_batch_larger_than_share():
    with pytest.raises(ValueError) as err:
        PlanSpec(num_samples=103, num_ranks=4, batch_size=26)
    message = str(err.value)
    assert "batch size 26 is larger than a worker's share" in message
    assert "25" in message
    # ⌊N/M⌋ itself is fine
    assert PlanSpec(103, 4, 25).iterations == 2


def test_spec_rejects_zero_batch():
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        PlanSpec(10, 2, 0)


def test_get_strategy_unknown_lists_choices():
    with pytest.raises(ValueError) as err:
        get_strategy("locality-aware")
    message = str(err.value)
    assert "'locality-aware'" in message
    for name in ("global", "local", "partial"):
        assert name in message


def test_spec_iterations_and_batch_bounds():
    spec = PlanSpec(103, 4, 5)  # ⌈103/4⌉ = 26 → 6 iterations, the last one short
    assert spec.iterations == 6
    assert spec.batch_bounds(0) == (0, 5)
    assert spec.batch_bounds(5) == (25, 26)
    assert spec.steps_from(4) == [(20, 25), (25, 26)]
    assert spec.step_of(4).tolist() == [4] * 5 + [5]
    assert len(spec.step_of(0)) == spec.max_share
