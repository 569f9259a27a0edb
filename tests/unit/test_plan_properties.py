"""Property tests of every entry of the strategy table over random run shapes.

Each test runs once per `STRATEGIES` entry, so a strategy added to the table is checked here
with no edit (one whose planner needs the peers' venv skips where `make peers` has not made it). What a strategy must satisfy is stated through its record (`home`, `data_path`,
`fixed_q`, `headroom`) and its plans, never through its name. Every property is checked for 3
epochs of a random valid spec: N in 1..3000, M in 1..min(64, N), b in 1..⌊N/M⌋, q in [0, 1]
where the strategy leaves q to the user, any seed.
"""

from __future__ import annotations

import math
from dataclasses import fields
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcshuffle.plan import (
    FROM_LOAN,
    FROM_SHARED,
    FROM_STORE,
    HOME_SHARED,
    HOME_STORE,
    PATH_EXCHANGE,
    PATH_LOANS,
    EpochPlan,
    Exchange,
    Loans,
    PlanSpec,
    Strategy,
    moves_per_rank,
    plan_epochs,
)
from tests.conftest import every_strategy_param

EPOCHS = 3
SETTINGS = settings()  # examples per test: the profile's (tests/conftest.py)
every_strategy = pytest.mark.parametrize("strategy", every_strategy_param())


@st.composite
def specs(draw, strategy: Strategy) -> PlanSpec:
    """A valid spec drawn directly (M <= N, 1 <= b <= N//M), no filtering; q is the strategy's own if fixed."""
    num_samples = draw(st.integers(1, 3000))
    num_ranks = draw(st.integers(1, min(64, num_samples)))
    batch_size = draw(st.integers(1, num_samples // num_ranks))
    q = strategy.fixed_q
    if q is None:
        q = draw(st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False))
    seed = draw(st.integers(0, 2**63 - 1))
    return PlanSpec(num_samples, num_ranks, batch_size, q, seed)


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


def holders(plan: EpochPlan) -> np.ndarray:
    """int64 (N,): the rank holding each sample at the epoch's start, -1 where none does."""
    owner = np.full(plan.spec.num_samples, -1, dtype=np.int64)
    for rank, ids in enumerate(plan.held):
        owner[ids] = rank
    return owner


def check_epoch_trains_every_sample(plan: EpochPlan) -> None:
    """Each rank trains on ⌈N/M⌉ ids; together they cover 0..N-1, and padding repeats an id at most once."""
    spec = plan.spec
    assert all(len(order) == spec.max_share for order in plan.order)
    trained = np.concatenate(plan.order)
    assert trained.min() >= 0 and trained.max() < spec.num_samples
    times = np.bincount(trained, minlength=spec.num_samples)
    assert times.min() == 1, f"samples lost in epoch {plan.epoch}: {np.flatnonzero(times == 0)[:10]}"
    assert times.max() <= 2, f"samples trained 3+ times in epoch {plan.epoch}: {np.flatnonzero(times > 2)[:10]}"


def check_sources(plan: EpochPlan, owner: np.ndarray) -> None:
    """`sources(rank)` agrees with what is held, lent and read from shared storage."""
    spec, loans = plan.spec, plan.loans
    for rank, order in enumerate(plan.order):
        sources = plan.sources(rank)
        store, shared, loan = sources == FROM_STORE, sources == FROM_SHARED, sources == FROM_LOAN
        assert sources.shape == order.shape and (store | shared | loan).all()
        assert (owner[order[store]] == rank).all(), "a rank reads from its store what it does not hold"
        assert (owner[order[shared]] == -1).all(), "a rank reads from shared storage what a rank holds"
        assert shared.sum() == plan.reads_shared[rank]
        # a loan is trained on at the step it is lent for: compare (step, id) pairs
        borrowed_at = np.flatnonzero(loan)
        trained = sorted(zip((borrowed_at // spec.batch_size).tolist(), order[borrowed_at].tolist()))
        planned = []
        if loans is not None:
            rows = loans.borrows_of(rank)
            planned = sorted(zip(loans.step[rows].tolist(), loans.sample_id[rows].tolist()))
        assert trained == planned


def check_loans(plan: EpochPlan, owner: np.ndarray) -> None:
    """One-step loans: a lender lends what it holds to another rank, at a step of the epoch."""
    loans, ranks = plan.loans, plan.spec.num_ranks
    rows = len(loans.sample_id)
    assert rows and all(len(column) == rows for column in (loans.step, loans.src, loans.dst))
    assert ((loans.step >= 0) & (loans.step < plan.spec.iterations)).all()
    assert ((loans.dst >= 0) & (loans.dst < ranks)).all() and (loans.src != loans.dst).all()
    assert (owner[loans.sample_id] == loans.src).all(), "a rank lends a sample it does not hold"


def check_exchange(plan: EpochPlan, owner: np.ndarray) -> None:
    """Algorithm 1: k slots, each a permutation of the ranks minus its fixed points, ≈ q·b moves per iteration."""
    spec, moves = plan.spec, plan.exchange
    ranks, slots = spec.num_ranks, moves_per_rank(spec)
    if slots == 0:
        assert moves is None
        return
    assert moves is not None and moves.slots == slots
    rows = len(moves.src)
    assert all(len(column) == rows for column in (moves.slot, moves.dst, moves.sample_id, moves.iteration))
    assert np.all(moves.src != moves.dst)
    assert np.all((moves.src >= 0) & (moves.src < ranks) & (moves.dst >= 0) & (moves.dst < ranks))
    assert np.all((moves.slot >= 0) & (moves.slot < slots))
    assert np.all((moves.iteration >= 0) & (moves.iteration < spec.iterations))
    assert len(np.unique(moves.sample_id)) == rows, "a sample moved twice in one epoch"
    sent, received = plan.sent_counts(), plan.received_counts()
    assert sent == received
    assert max(sent) <= slots
    # within one slot every rank sends at most once and receives at most once
    slot_src = moves.slot.astype(np.int64) * ranks + moves.src
    slot_dst = moves.slot.astype(np.int64) * ranks + moves.dst
    assert len(np.unique(slot_src)) == rows and len(np.unique(slot_dst)) == rows
    assert (owner[moves.sample_id] == moves.src).all(), "a rank sends a sample it does not hold"
    assert plan.store_peak() == [len(held) + extra for held, extra in zip(plan.held, received)]
    # next_held == held − sent + received, computed independently
    expected = [set(ids.tolist()) for ids in plan.held]
    for src, dst, sample_id in zip(moves.src.tolist(), moves.dst.tolist(), moves.sample_id.tolist()):
        expected[src].discard(sample_id)
        expected[dst].add(sample_id)
    assert [ids.tolist() for ids in plan.next_held()] == [sorted(ids) for ids in expected]


def check_home_store(strategy: Strategy, plan: EpochPlan, first_sizes: list[int]) -> None:
    """The ranks' stores partition 0..N-1 in sizes that differ by ≤ 1, never change, and fit the bounds."""
    spec = plan.spec
    for ids in plan.held:
        assert np.all(np.diff(ids) > 0), "held ids must be sorted and unique"
    assert sorted(np.concatenate(plan.held).tolist()) == list(range(spec.num_samples))
    sizes = [len(ids) for ids in plan.held]
    assert min(sizes) == spec.min_share and max(sizes) == spec.max_share
    assert sizes == first_sizes
    peak = max(plan.store_peak())
    assert peak <= peak_bound(spec), (peak, peak_bound(spec))
    # staging reserves `headroom`: the epoch's moves must fit in it
    assert peak <= spec.max_share * (1 + strategy.headroom(spec)) + 1e-9, (peak, strategy.headroom(spec))


def check_home_shared(plan: EpochPlan) -> None:
    assert all(len(ids) == 0 for ids in plan.held)
    assert plan.store_peak() == [0] * plan.spec.num_ranks


@every_strategy
@SETTINGS
@given(data=st.data())
def test_plan_invariants(strategy: Strategy, data):
    spec = data.draw(specs(strategy), label="spec")
    plans = list(plan_epochs(spec, strategy.name, EPOCHS))
    assert [plan.epoch for plan in plans] == list(range(EPOCHS))
    for plan in plans:
        assert len(plan.held) == len(plan.order) == len(plan.reads_shared) == spec.num_ranks
        owner = holders(plan)
        check_epoch_trains_every_sample(plan)
        check_sources(plan, owner)
        assert sum(plan.sent_counts()) == sum(plan.received_counts())
        # only the data path built for moves or loans may be handed a plan that has them
        assert plan.exchange is None or strategy.data_path == PATH_EXCHANGE
        assert plan.loans is None or strategy.data_path == PATH_LOANS
        if strategy.data_path == PATH_EXCHANGE:
            check_exchange(plan, owner)
        if plan.loans is not None:
            check_loans(plan, owner)
        if strategy.home == HOME_STORE:
            check_home_store(strategy, plan, [len(ids) for ids in plans[0].held])
        else:
            assert strategy.home == HOME_SHARED
            check_home_shared(plan)
    # the next plan starts from what the previous one left
    for before, after in zip(plans, plans[1:]):
        assert [ids.tolist() for ids in before.next_held()] == [ids.tolist() for ids in after.held]


def as_lists(plans: list[EpochPlan]) -> list[tuple]:
    def rows(transfers: Exchange | Loans | None) -> list | None:
        if transfers is None:
            return None
        values = (getattr(transfers, field.name) for field in fields(transfers))
        return [value.tolist() if isinstance(value, np.ndarray) else value for value in values]

    return [
        (plan.epoch, [ids.tolist() for ids in plan.held], [ids.tolist() for ids in plan.order],
         rows(plan.exchange), rows(plan.loans), list(plan.reads_shared))
        for plan in plans
    ]


def split(plan: EpochPlan) -> tuple[list, list]:
    """Which ids each rank holds and which it trains on (in any order)."""
    return [ids.tolist() for ids in plan.held], [sorted(ids.tolist()) for ids in plan.order]


@every_strategy
@SETTINGS
@given(data=st.data())
def test_plan_determinism(strategy: Strategy, data):
    spec = data.draw(specs(strategy), label="spec")
    plans = list(plan_epochs(spec, strategy.name, EPOCHS))
    again = PlanSpec(spec.num_samples, spec.num_ranks, spec.batch_size, spec.q, spec.seed)
    assert as_lists(list(plan_epochs(again, strategy.name, EPOCHS))) == as_lists(plans)

    # another seed, another epoch-0 split. Only where a coincidence is negligible: with N >= 20
    # and M >= 2 the chance that two seeds give the same split is at most 1/C(20,10) ≈ 5e-6.
    if spec.num_samples >= 20 and spec.num_ranks >= 2:
        other = PlanSpec(spec.num_samples, spec.num_ranks, spec.batch_size, spec.q, spec.seed + 1)
        assert split(plans[0]) != split(next(plan_epochs(other, strategy.name, 1)))
