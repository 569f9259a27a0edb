"""What each rank reads, sends and borrows per iteration (hpcshuffle/scale/traffic.py), checked
against the plan it is computed from, for every entry of the strategy table.

Every position of a rank's epoch order must be accounted for exactly once (read from the store,
read from shared storage or borrowed), every exchange move must be one sample of one coalesced
message, and every loan one sample of one borrowed transfer.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.plan import (
    FROM_LOAN,
    FROM_SHARED,
    FROM_STORE,
    HOME_SHARED,
    PATH_EXCHANGE,
    PATH_LOANS,
    PATH_SHARED,
    PATH_STORE,
    PlanSpec,
    Strategy,
    plan_epochs,
)
from hpcshuffle.scale.traffic import Transfers, epoch_traffic, traffic_of
from tests.conftest import every_strategy_param

every_strategy = pytest.mark.parametrize("strategy", every_strategy_param())
# (N, M, b, R): 211 is prime, so partitions differ in size and the last batch is short; M = 1 has no
# peers; R > 1: nodes of R ranks share one partition (node scope, for the strategies that have one)
SHAPES = [(211, 6, 7, 1), (100, 4, 25, 1), (64, 8, 3, 1), (37, 1, 5, 1), (211, 6, 7, 3), (100, 8, 5, 2)]
EPOCHS = (0, 2)  # epoch 2 replays the partition's history (partial's moves change what is held)


def spec_for(strategy: Strategy, shape: tuple[int, int, int, int]) -> PlanSpec:
    samples, ranks, batch, per_node = shape
    return PlanSpec(samples, ranks, batch, strategy.q_for(0.3 if strategy.fixed_q is None else None), seed=11,
                    ranks_per_node=per_node if strategy.node_scope else 1)


def plan_of(spec: PlanSpec, shuffle: str, epoch: int):
    return next(plan_epochs(spec, shuffle, epoch + 1, start_epoch=epoch))


def borrowed(traffic) -> np.ndarray:
    """int64 (M, I): samples each rank borrows at each iteration."""
    spec = traffic.spec
    counts = np.zeros((spec.num_ranks, spec.iterations), dtype=np.int64)
    np.add.at(counts, (traffic.loans.owner, traffic.loans.iteration), traffic.loans.samples)
    return counts


def rows(transfers: Transfers) -> list[tuple[int, int, int, int]]:
    return list(zip(transfers.owner.tolist(), transfers.iteration.tolist(), transfers.peer.tolist(),
                    transfers.samples.tolist()))


@every_strategy
@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-M{m}-b{b}-R{r}" for n, m, b, r in SHAPES])
@pytest.mark.parametrize("epoch", EPOCHS)
def test_every_position_is_read_or_borrowed_exactly_once(strategy, shape, epoch):
    spec = spec_for(strategy, shape)
    traffic = epoch_traffic(spec, strategy.name, epoch)
    plan = plan_of(spec, strategy.name, epoch)
    assert traffic.spec == spec and traffic.shuffle == strategy.name
    assert traffic.iterations == spec.iterations
    shape_mi = (spec.num_ranks, spec.iterations)
    assert traffic.local_reads.shape == traffic.shared_reads.shape == shape_mi
    assert traffic.local_reads.dtype == traffic.shared_reads.dtype == np.int64
    assert traffic.local_reads.min() >= 0 and traffic.shared_reads.min() >= 0
    per_step = traffic.local_reads + traffic.shared_reads + borrowed(traffic)
    # per iteration: the batch the plan's spec gives it
    sizes = [stop - start for start, stop in (spec.batch_bounds(i) for i in range(spec.iterations))]
    assert (per_step == np.array(sizes)[None, :]).all()
    # per epoch: ⌈N/M⌉ on every rank
    assert (per_step.sum(axis=1) == spec.max_share).all()
    # and each part is what the plan's sources say, position by position
    for rank in range(spec.num_ranks):
        sources = plan.sources(rank)
        assert traffic.local_reads[rank].sum() == np.count_nonzero(sources == FROM_STORE)
        assert traffic.shared_reads[rank].sum() == np.count_nonzero(sources == FROM_SHARED)
        assert borrowed(traffic)[rank].sum() == np.count_nonzero(sources == FROM_LOAN)
    assert traffic.shared_reads.sum(axis=1).tolist() == plan.reads_shared


@every_strategy
@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-M{m}-b{b}-R{r}" for n, m, b, r in SHAPES])
@pytest.mark.parametrize("epoch", EPOCHS)
def test_sends_are_the_plans_moves_coalesced(strategy, shape, epoch):
    spec = spec_for(strategy, shape)
    traffic = epoch_traffic(spec, strategy.name, epoch)
    moves = plan_of(spec, strategy.name, epoch).exchange
    sends = traffic.sends
    if moves is None:
        assert sends.total() == 0 and len(sends.owner) == 0
        return
    assert sends.total() == len(moves.src)
    # one row per (sender, iteration, receiver), no duplicates, no empty rows, sorted by sender
    keys = rows(sends)
    assert len({key[:3] for key in keys}) == len(keys)
    assert (sends.samples >= 1).all()
    assert (np.diff(sends.owner) >= 0).all()
    per_node = spec.ranks_per_node
    assert (sends.owner // per_node != sends.peer // per_node).all()  # nobody sends to itself or its node
    expected: dict[tuple[int, int, int], int] = {}
    for src, iteration, dst in zip(moves.src.tolist(), moves.iteration.tolist(), moves.dst.tolist()):
        expected[(src, iteration, dst)] = expected.get((src, iteration, dst), 0) + 1
    assert {key[:3]: key[3] for key in keys} == expected
    # every node (every rank in rank scope) sends as many samples as it receives (Algorithm 1's slots)
    sent = np.bincount(sends.owner // per_node, weights=sends.samples, minlength=spec.nodes)
    received = np.bincount(sends.peer // per_node, weights=sends.samples, minlength=spec.nodes)
    assert (sent == received).all()
    assert ((0 <= sends.iteration) & (sends.iteration < spec.iterations)).all()


@every_strategy
@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-M{m}-b{b}-R{r}" for n, m, b, r in SHAPES])
def test_loans_are_the_plans_loans_coalesced_by_borrower(strategy, shape):
    spec = spec_for(strategy, shape)
    traffic = epoch_traffic(spec, strategy.name)
    lent = plan_of(spec, strategy.name, 0).loans
    loans = traffic.loans
    if lent is None:
        assert loans.total() == 0
        return
    assert loans.total() == len(lent.sample_id)
    keys = rows(loans)
    assert len({key[:3] for key in keys}) == len(keys)
    expected: dict[tuple[int, int, int], int] = {}
    for step, src, dst in zip(lent.step.tolist(), lent.src.tolist(), lent.dst.tolist()):
        expected[(dst, step, src)] = expected.get((dst, step, src), 0) + 1  # owner = borrower, peer = lender
    assert {key[:3]: key[3] for key in keys} == expected


@every_strategy
def test_what_each_data_path_reads(strategy):
    """Through the strategy's record: a shared home reads only shared storage; a store path only the
    store; the exchange path moves samples; the loans path borrows them."""
    spec = spec_for(strategy, (211, 6, 7, 1))
    traffic = epoch_traffic(spec, strategy.name)
    plan = plan_of(spec, strategy.name, 0)
    if strategy.home == HOME_SHARED:
        assert traffic.local_reads.sum() == 0
        assert (traffic.shared_reads.sum(axis=1) == spec.max_share).all()
    else:
        assert traffic.local_reads.sum() > 0
    if strategy.data_path in (PATH_STORE, PATH_EXCHANGE):
        assert traffic.shared_reads.sum() == 0
        assert (traffic.local_reads.sum(axis=1) == spec.max_share).all()
    if strategy.data_path in (PATH_STORE, PATH_SHARED, PATH_LOANS):
        assert traffic.sends.total() == 0
    if strategy.data_path != PATH_LOANS:
        assert traffic.loans.total() == 0
    if strategy.data_path == PATH_EXCHANGE:
        assert traffic.sends.total() == len(plan.exchange.src) > 0
    if strategy.data_path == PATH_LOANS:
        assert traffic.loans.total() == len(plan.loans.sample_id) > 0


def test_partial_at_q_zero_moves_nothing():
    traffic = epoch_traffic(PlanSpec(211, 6, 7, q=0.0), "partial")
    assert traffic.sends.total() == 0 and traffic.loans.total() == 0
    assert (traffic.local_reads.sum(axis=1) == 36).all()


def test_partial_sends_are_spread_over_the_epoch():
    spec = PlanSpec(400, 4, 10, q=0.5)  # k = 50 moves per rank over 10 iterations
    sends = epoch_traffic(spec, "partial").sends
    per_iteration = np.bincount(sends.iteration, weights=sends.samples, minlength=spec.iterations)
    assert spec.iterations == 10
    assert (per_iteration > 0).all()
    assert sends.total() <= 50 * 4


def test_epoch_traffic_is_traffic_of_the_epochs_plan():
    spec = PlanSpec(211, 6, 7, q=0.3, seed=5)
    plans = list(plan_epochs(spec, "partial", 3))
    for epoch, plan in enumerate(plans):
        direct, replayed = traffic_of(plan, "partial"), epoch_traffic(spec, "partial", epoch)
        assert (direct.local_reads == replayed.local_reads).all()
        assert rows(direct.sends) == rows(replayed.sends)
    # the moves differ from epoch to epoch
    assert rows(epoch_traffic(spec, "partial", 0).sends) != rows(epoch_traffic(spec, "partial", 1).sends)


def test_unknown_shuffle_is_refused():
    with pytest.raises(ValueError, match=r"unknown shuffle 'random'; choose one of \['corgipile', 'global', 'local'"):
        epoch_traffic(PlanSpec(100, 4, 5), "random")


# ---- Transfers ---------------------------------------------------------------------------------

def test_transfers_coalesce_and_group_by_iteration():
    owner = np.array([1, 0, 1, 1, 1, 3])
    iteration = np.array([2, 0, 2, 0, 2, 1])
    peer = np.array([3, 2, 3, 0, 2, 1])
    transfers = Transfers.coalesce(owner, iteration, peer, ranks=4, iterations=3)
    assert rows(transfers) == [(0, 0, 2, 1), (1, 0, 0, 1), (1, 2, 2, 1), (1, 2, 3, 2), (3, 1, 1, 1)]
    assert transfers.total() == 6
    assert transfers.of(0) == {0: [(2, 1)]}
    assert transfers.of(1) == {0: [(0, 1)], 2: [(2, 1), (3, 2)]}
    assert transfers.of(2) == {}
    assert transfers.of(3) == {1: [(1, 1)]}
    assert all(isinstance(value, int) for pairs in transfers.of(1).values() for pair in pairs for value in pair)


def test_empty_transfers():
    nothing = Transfers.empty()
    assert nothing.total() == 0
    assert nothing.of(0) == {}
    empty = Transfers.coalesce(*(np.empty(0, dtype=np.int64),) * 3, ranks=4, iterations=3)
    assert empty.total() == 0 and empty.of(2) == {}


def test_transfers_of_matches_the_rows_for_every_rank():
    spec = PlanSpec(211, 6, 7, q=0.7, seed=3)
    sends = epoch_traffic(spec, "partial").sends
    for rank in range(spec.num_ranks):
        grouped = sends.of(rank)
        flat = [(rank, iteration, peer, samples) for iteration, pairs in sorted(grouped.items())
                for peer, samples in pairs]
        assert flat == [row for row in rows(sends) if row[0] == rank]
        assert sum(samples for pairs in grouped.values() for _, samples in pairs) == \
            int(sends.samples[sends.owner == rank].sum())
