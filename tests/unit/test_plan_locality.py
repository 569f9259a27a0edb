"""Locality-aware loading (Yang & Cong §V) and its load balancing (their Algorithm 1)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcshuffle.plan import FROM_LOAN, FROM_SHARED, FROM_STORE, PlanSpec, plan_epochs
from hpcshuffle.plan.balance import balance
from hpcshuffle.plan.common import initial_partition
from hpcshuffle.plan.global_ import plan_global
from hpcshuffle.plan.locality import plan_locality

SETTINGS = settings()  # examples per test: the profile's (tests/conftest.py)


def test_balance_reproduces_the_papers_figure_5():
    # Red holds 2, Green 6, Blue 4 of a 12-sample global batch: Red loads 2 from Green
    assert balance(np.array([2, 6, 4]), np.array([4, 4, 4])) == [(1, 0, 2)]


@SETTINGS
@given(st.lists(st.integers(0, 40), min_size=1, max_size=64))
def test_balance_evens_out_with_at_most_p_minus_1_transfers(counts):
    counts = np.array(counts)
    total, ranks = int(counts.sum()), len(counts)
    targets = np.full(ranks, total // ranks)
    targets[: total % ranks] += 1
    transfers = balance(counts, targets)
    after = counts.copy()
    for src, dst, amount in transfers:
        assert amount > 0 and counts[src] > targets[src] and counts[dst] < targets[dst]
        after[src] -= amount
        after[dst] += amount
    np.testing.assert_array_equal(after, targets)
    assert len(transfers) <= max(ranks - 1, 0)
    # 2-approximation: each transfer settles one learner, the optimum needs ≥ half the unsettled ones
    unsettled = int(np.count_nonzero(counts != targets))
    assert len(transfers) <= max(unsettled - 1, 0)


def test_balance_rejects_totals_that_differ():
    with pytest.raises(ValueError, match="hold 5 samples of the batch but must train on 6"):
        balance(np.array([5, 0]), np.array([3, 3]))


@st.composite
def specs(draw):
    n = draw(st.integers(1, 600))
    m = draw(st.integers(1, min(16, n)))
    b = draw(st.integers(1, n // m))
    return PlanSpec(n, m, b, 0.0, draw(st.integers(0, 2**32)))


def check_epoch(spec: PlanSpec, plan, held):
    gs = plan_global(spec, held, plan.epoch)
    owner = {int(i): rank for rank, ids in enumerate(held) for i in ids}
    loans = plan.loans
    for step in range(spec.iterations):
        start, stop = spec.batch_bounds(step)
        local = [order[start:stop].tolist() for order in plan.order]
        # equal local batches, and Theorem 1: the same global batch as global shuffling's
        assert all(len(ids) == stop - start for ids in local)
        expected = Counter(np.concatenate([order[start:stop] for order in gs.order]).tolist())
        assert Counter(sum(local, [])) == expected
        # every sample comes from the rank's cache, a loan of this step, or shared storage
        lent = Counter() if loans is None else Counter(
            zip(loans.dst[loans.step == step].tolist(), loans.sample_id[loans.step == step].tolist()))
        for rank, ids in enumerate(local):
            for sample_id in ids:
                holder = owner.get(sample_id)
                if holder == rank or holder is None:
                    continue
                assert lent[(rank, sample_id)] > 0, (step, rank, sample_id)
                lent[(rank, sample_id)] -= 1
        assert sum(lent.values()) == 0, "a loan nobody trains on"
        if loans is not None:
            rows = loans.step == step
            assert all(owner[i] == s for s, i in zip(loans.src[rows].tolist(), loans.sample_id[rows].tolist()))
            pairs = set(zip(loans.src[rows].tolist(), loans.dst[rows].tolist()))
            assert len(pairs) <= spec.num_ranks - 1


@SETTINGS
@given(specs())
def test_locality_batches_equal_global_shufflings_and_caches_never_change(spec):
    plans = list(plan_epochs(spec, "locality", 2))
    start = initial_partition(spec)
    for plan in plans:
        assert [ids.tolist() for ids in plan.held] == [ids.tolist() for ids in start]
        assert plan.exchange is None
        assert plan.reads_shared == [0] * spec.num_ranks
        assert plan.store_peak() == [len(ids) for ids in start]
        check_epoch(spec, plan, plan.held)
        lent = 0 if plan.loans is None else len(plan.loans.sample_id)
        assert sum(plan.sent_counts()) == sum(plan.received_counts()) == lent


def test_uncached_samples_are_read_from_shared_storage_by_ranks_that_are_short():
    spec = PlanSpec(400, 4, 10, 0.0, 3)
    held = [ids[: len(ids) // 2] for ids in initial_partition(spec)]  # caches hold half the data
    plan = plan_locality(spec, held, 0)
    check_epoch(spec, plan, held)
    cached = set(np.concatenate(held).tolist())
    trained = np.concatenate(plan.order).tolist()
    assert sum(plan.reads_shared) == sum(1 for i in trained if i not in cached)
    assert sum(plan.reads_shared) > 0


def test_lending_volume_is_a_few_percent_at_the_papers_batch_sizes():
    # Yang & Cong Fig. 6: ≈ 6.9 % of a global batch moves at local batch 32 (1/√b scaling)
    spec = PlanSpec(16 * 32 * 40, 16, 32, 0.0, 1)
    plan = plan_locality(spec, initial_partition(spec), 0)
    moved = len(plan.loans.sample_id) / (spec.num_ranks * spec.max_share)
    assert 0.05 < moved < 0.09


def test_sources_name_where_each_position_comes_from():
    spec = PlanSpec(400, 4, 10, 0.0, 5)
    held = [ids[: 3 * len(ids) // 4] for ids in initial_partition(spec)]
    plan = plan_locality(spec, held, 1)
    for rank in range(spec.num_ranks):
        sources = plan.sources(rank)
        order = plan.order[rank]
        borrowed_rows = plan.loans.borrows_of(rank)
        assert (sources == FROM_LOAN).sum() == len(borrowed_rows)
        assert sorted(order[sources == FROM_LOAN].tolist()) == sorted(plan.loans.sample_id[borrowed_rows].tolist())
        assert set(order[sources == FROM_STORE].tolist()) <= set(held[rank].tolist())
        assert not set(order[sources == FROM_SHARED].tolist()) & set(np.concatenate(held).tolist())
        assert (sources == FROM_SHARED).sum() == plan.reads_shared[rank]
