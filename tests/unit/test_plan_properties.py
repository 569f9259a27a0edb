"""Property tests of the shuffling planners over random run shapes.

Every property is checked for 3 epochs of a random valid spec: N in 1..3000, M in 1..min(64, N),
b in 1..⌊N/M⌋, q in [0, 1] (only partial uses it; local/global have fixed q), any seed.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcshuffle.plan import STRATEGIES, PlanSpec, moves_per_rank, plan_epochs

EPOCHS = 3
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def run_shapes(draw):
    """(spec, shuffle): a valid spec is drawn directly (M <= N, 1 <= b <= N//M), no filtering."""
    shuffle = draw(st.sampled_from(["local", "partial", "global"]))
    n = draw(st.integers(1, 3000))
    m = draw(st.integers(1, min(64, n)))
    b = draw(st.integers(1, n // m))
    if shuffle == "partial":
        q = draw(st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False))
    else:
        q = STRATEGIES[shuffle].fixed_q
    seed = draw(st.integers(0, 2**63 - 1))
    return PlanSpec(num_samples=n, num_ranks=m, batch_size=b, q=q, seed=seed), shuffle


def peak_bound(spec: PlanSpec) -> int:
    """⌈(1+q)·N/M⌉ computed exactly, for both readings of q.

    `Fraction(q)` is the exact value of the float (no rounding), `Fraction(repr(q))` the decimal the
    user typed (0.1 rather than 0.1000000000000000055…). The two bounds differ only when (1+q)·N/M
    is within ~1e-16 of an integer; the planner must respect both, so the smaller one is asserted.
    Float arithmetic such as `math.ceil((1 + q) * N / M)` is NOT used: 1.1 * 100 / 10 == 11.000000000000002
    would give 12 and hide a real off-by-one.
    """
    n, m = spec.num_samples, spec.num_ranks
    exact = math.ceil((1 + Fraction(spec.q)) * n / m)
    decimal = math.ceil((1 + Fraction(repr(spec.q))) * n / m)
    return min(exact, decimal)


def check_order_covers_held(order: np.ndarray, held: np.ndarray, length: int) -> None:
    """order has `length` ids, every held id at least once, nothing else; padding repeats ≤ 1 id per missing slot."""
    assert len(order) == length
    counts = Counter(order.tolist())
    assert set(counts) == set(held.tolist())
    assert sum(c - 1 for c in counts.values()) == length - len(held)
    assert max(counts.values()) <= 2


@SETTINGS
@given(run_shapes())
def test_plan_invariants(shape):
    spec, shuffle = shape
    n, m = spec.num_samples, spec.num_ranks
    ceil_share = -(-n // m)
    bound = peak_bound(spec)
    k = moves_per_rank(spec)
    plans = list(plan_epochs(spec, shuffle, EPOCHS))
    assert [p.epoch for p in plans] == list(range(EPOCHS))

    sizes0 = None
    for plan in plans:
        assert len(plan.held) == len(plan.order) == len(plan.reads_shared) == m

        if shuffle == "global":
            # (a) nothing held; (c) concatenated orders = permutation padded with its own head
            assert all(len(ids) == 0 for ids in plan.held)
            flat = np.concatenate(plan.order)
            assert all(len(o) == ceil_share for o in plan.order)
            assert len(flat) == m * ceil_share
            assert sorted(flat[:n].tolist()) == list(range(n))
            pad = m * ceil_share - n
            assert pad < m
            np.testing.assert_array_equal(flat[n:], flat[:pad])
            assert max(Counter(flat.tolist()).values()) <= 2
            assert plan.exchange is None
            # (f)
            assert plan.reads_shared == [ceil_share] * m
            # (e)
            assert plan.store_peak() == [0] * m
            continue

        # (a) the held partition is a permutation of range(N), each part sorted
        for ids in plan.held:
            assert np.all(np.diff(ids) > 0), "held ids must be sorted and unique"
        assert sorted(np.concatenate(plan.held).tolist()) == list(range(n))

        # (b) sizes differ by at most 1 and never change
        sizes = [len(ids) for ids in plan.held]
        assert max(sizes) - min(sizes) <= 1
        assert min(sizes) == n // m and max(sizes) == ceil_share
        if sizes0 is None:
            sizes0 = sizes
        assert sizes == sizes0

        # (c) each rank trains on ⌈N/M⌉ ids, exactly what it holds (padded)
        for order, ids in zip(plan.order, plan.held):
            check_order_covers_held(order, ids, ceil_share)

        # (f) local and partial never read shared storage
        assert plan.reads_shared == [0] * m

        # (e) peak store within ⌈(1+q)·N/M⌉
        peak = plan.store_peak()
        assert max(peak) <= bound, (peak, bound)

        # (d) the exchange
        ex = plan.exchange
        if shuffle == "local" or k == 0:
            assert ex is None
            assert plan.sent_counts() == plan.received_counts() == [0] * m
            assert all(np.array_equal(a, b) for a, b in zip(plan.next_held(), plan.held))
            continue
        assert ex is not None
        assert ex.slots == k
        rows = len(ex.src)
        for arr in (ex.slot, ex.dst, ex.sample_id, ex.iteration):
            assert len(arr) == rows
        assert np.all(ex.src != ex.dst)
        assert np.all((ex.src >= 0) & (ex.src < m) & (ex.dst >= 0) & (ex.dst < m))
        assert np.all((ex.slot >= 0) & (ex.slot < k))
        assert np.all((ex.iteration >= 0) & (ex.iteration < spec.iterations))
        assert len(np.unique(ex.sample_id)) == rows, "a sample moved twice in one epoch"
        sent, received = plan.sent_counts(), plan.received_counts()
        assert sent == received
        assert max(sent) <= k
        # within one slot every rank sends at most once and receives at most once
        slot_src = ex.slot.astype(np.int64) * m + ex.src
        slot_dst = ex.slot.astype(np.int64) * m + ex.dst
        assert len(np.unique(slot_src)) == rows and len(np.unique(slot_dst)) == rows
        held_sets = [set(ids.tolist()) for ids in plan.held]
        for src, sid in zip(ex.src.tolist(), ex.sample_id.tolist()):
            assert sid in held_sets[src], "a rank sends a sample it does not hold"
        assert peak == [len(h) + r for h, r in zip(plan.held, received)]
        # next_held == held − sent + received, computed independently
        expected = [set(h) for h in held_sets]
        for src, dst, sid in zip(ex.src.tolist(), ex.dst.tolist(), ex.sample_id.tolist()):
            expected[src].discard(sid)
            expected[dst].add(sid)
        nxt = plan.next_held()
        assert [a.tolist() for a in nxt] == [sorted(s) for s in expected]

    # the next plan starts from what the previous one left
    for before, after in zip(plans, plans[1:]):
        if shuffle != "global":
            assert [a.tolist() for a in before.next_held()] == [a.tolist() for a in after.held]


def plans_as_lists(spec: PlanSpec, shuffle: str):
    out = []
    for plan in plan_epochs(spec, shuffle, EPOCHS):
        ex = plan.exchange
        out.append((
            plan.epoch,
            [a.tolist() for a in plan.held],
            [a.tolist() for a in plan.order],
            None if ex is None else (ex.slots, ex.slot.tolist(), ex.src.tolist(), ex.dst.tolist(),
                                     ex.sample_id.tolist(), ex.iteration.tolist()),
            list(plan.reads_shared),
        ))
    return out


@SETTINGS
@given(run_shapes())
def test_plan_determinism(shape):
    spec, shuffle = shape
    first = plans_as_lists(spec, shuffle)
    again = PlanSpec(spec.num_samples, spec.num_ranks, spec.batch_size, spec.q, spec.seed)
    assert plans_as_lists(again, shuffle) == first

    # (g) another seed, another epoch-0 split. Only where a coincidence is negligible: with N >= 20
    # and M >= 2 the chance that two seeds give the same split is at most 1/C(20,10) ≈ 5e-6.
    if spec.num_samples >= 20 and spec.num_ranks >= 2:
        other = PlanSpec(spec.num_samples, spec.num_ranks, spec.batch_size, spec.q, spec.seed + 1)
        plan0, other0 = next(plan_epochs(spec, shuffle, 1)), next(plan_epochs(other, shuffle, 1))
        if shuffle == "global":
            # global holds nothing: the epoch-0 split is which rank trains on which ids
            split, other_split = plan0.order, other0.order
        else:
            split, other_split = plan0.held, other0.held
        assert [sorted(a.tolist()) for a in split] != [sorted(a.tolist()) for a in other_split]
