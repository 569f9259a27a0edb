"""Two-level (node-scope) plans: ranks of a node share its partition, only nodes exchange.

`PlanSpec.ranks_per_node` R > 1 groups consecutive ranks into nodes. The invariants below are the
ones storage.scope=node relies on; R = 1 must stay exactly the rank-scope plan.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.analysis.quality import PairMixing
from hpcshuffle.plan import PlanSpec, initial_partition, moves_per_rank, plan_epochs


def node_sizes(spec: PlanSpec, held: list[np.ndarray]) -> list[int]:
    return [sum(len(held[rank]) for rank in spec.node_ranks(node)) for node in range(spec.nodes)]


@pytest.mark.parametrize("shuffle", ["local", "partial"])
def test_one_rank_per_node_is_the_rank_plan(shuffle):
    ranked = PlanSpec(211, 4, 8, q=0.3, seed=5)
    one_per_node = PlanSpec(211, 4, 8, q=0.3, seed=5, ranks_per_node=1)
    for a, b in zip(plan_epochs(ranked, shuffle, 4), plan_epochs(one_per_node, shuffle, 4), strict=True):
        assert [x.tolist() for x in a.order] == [x.tolist() for x in b.order]
        assert [x.tolist() for x in a.held] == [x.tolist() for x in b.held]


def test_initial_partition_cuts_nodes_first():
    # 10 samples, 2 nodes × 2 ranks: nodes of 5 and 5, ranks of 3, 2, 3, 2 (rank scope: 3, 3, 2, 2)
    spec = PlanSpec(10, 4, 1, ranks_per_node=2)
    held = initial_partition(spec)
    assert [len(ids) for ids in held] == [3, 2, 3, 2]
    assert node_sizes(spec, held) == [5, 5]
    assert sorted(np.concatenate(held).tolist()) == list(range(10))


@pytest.mark.parametrize(("n", "m", "r", "q"), [(211, 4, 2, 0.3), (1000, 6, 3, 0.5), (503, 8, 2, 1.0), (97, 6, 2, 0.1)])
def test_node_plan_invariants(n, m, r, q):
    spec = PlanSpec(n, m, 4, q=q, seed=3, ranks_per_node=r)
    first = node_sizes(spec, initial_partition(spec))
    k = moves_per_rank(spec)
    assert k == int(q * (n // (m // r)) + 1e-9)  # ⌊q·⌊N/nodes⌋⌋ per node
    for plan in plan_epochs(spec, "partial", 5):
        # every sample is held once, node partitions keep their sizes
        assert sorted(np.concatenate(plan.held).tolist()) == list(range(n))
        assert node_sizes(spec, plan.held) == first
        for rank in range(m):
            order = plan.order[rank]
            assert len(order) == spec.max_share
            # a rank trains only on what its node holds, and its node's ranks together train on all of it
            assert np.isin(order, plan.node_held(rank)).all()
            homes = plan.homes(rank)
            peers = list(spec.node_ranks(spec.node_of(rank)))
            assert all(order[i] in plan.held[peers[home]] for i, home in enumerate(homes))
        for node in range(spec.nodes):
            dealt = np.concatenate([plan.order[rank] for rank in spec.node_ranks(node)])
            assert set(dealt.tolist()) == set(plan.node_held(spec.node_ranks(node)[0]).tolist())
        moves = plan.exchange
        assert moves is not None
        # only nodes exchange; the sender holds the sample; a node sends as many as it receives, ≤ k
        assert (moves.src // r != moves.dst // r).all()
        assert all(sample in plan.held[src] for sample, src in zip(moves.sample_id, moves.src))
        sent = np.bincount(moves.src // r, minlength=spec.nodes)
        received = np.bincount(moves.dst // r, minlength=spec.nodes)
        assert sent.tolist() == received.tolist() and sent.max() <= k
        # in every iteration each rank sends as many as it receives, a 1/R share of its node's
        per_step = spec.iterations * np.arange(m)
        sent_per_step = np.bincount(per_step[moves.src] + moves.iteration, minlength=m * spec.iterations)
        received_per_step = np.bincount(per_step[moves.dst] + moves.iteration, minlength=m * spec.iterations)
        assert sent_per_step.tolist() == received_per_step.tolist()
        assert [len(ids) for ids in plan.held] == [len(ids) for ids in initial_partition(spec)]
        # the node's stores never hold more than ⌈(1+q)·N/nodes⌉ during the epoch
        peaks = plan.store_peak()
        assert max(sum(peaks[rank] for rank in spec.node_ranks(node)) for node in range(spec.nodes)) <= spec.storage_bound()


def test_node_scope_moves_only_what_crosses_nodes_and_mixes_more():
    """2 nodes × 2 ranks at q = 0.3: node scope sends about 2/3 of what rank scope sends (a rank's
    destination is its own node's other rank 1/3 of the time, which node scope does not count),
    and local shuffling over a node's partition mixes more than over a rank's."""
    n, epochs = 2000, 6
    sent, quality = {}, {}
    for r in (1, 2):
        for shuffle in ("partial", "local"):
            spec = PlanSpec(n, 4, 10, q=0.3, seed=0, ranks_per_node=r)
            mixing = PairMixing(n, 4, seed=0)
            total = 0
            for plan in plan_epochs(spec, shuffle, epochs):
                total += sum(plan.sent_counts())
                score = mixing.add_epoch(plan.order)
            sent[r, shuffle], quality[r, shuffle] = total, score["quality"]
    assert 0.55 < sent[2, "partial"] / sent[1, "partial"] < 0.8
    assert quality[2, "local"] > quality[1, "local"] + 0.2
    assert quality[2, "partial"] > quality[1, "partial"]


def test_workers_must_split_into_equal_nodes():
    with pytest.raises(ValueError, match="cannot be split into nodes of 3 ranks"):
        PlanSpec(100, 4, 1, ranks_per_node=3)


def test_node_storage_bound():
    spec = PlanSpec(1001, 4, 1, q=0.1, ranks_per_node=2)
    assert spec.nodes == 2 and spec.node_min_share == 500
    assert spec.storage_bound() == 551  # ⌈1.1 · 1001 / 2⌉ = ⌈550.55⌉
    assert spec.storage_headroom() == pytest.approx(551 / 501 - 1)


@pytest.mark.parametrize(("n", "m", "r", "cached"), [(211, 4, 2, 1.0), (400, 6, 3, 0.5), (97, 8, 4, 0.75)])
def test_node_locality_trains_global_batches_and_lends_only_between_nodes(n, m, r, cached):
    from hpcshuffle.plan import FROM_LOAN, FROM_SHARED, FROM_STORE
    from hpcshuffle.plan.global_ import plan_global
    from hpcshuffle.plan.locality import plan_locality

    spec = PlanSpec(n, m, 4, seed=2, ranks_per_node=r)
    held = [ids[: int(len(ids) * cached)] for ids in initial_partition(spec)]  # stores hold a part
    plan = plan_locality(spec, held, 1)
    reference = plan_global(spec, held, 1).order
    for step in range(spec.iterations):
        start, stop = spec.batch_bounds(step)
        trained = sorted(np.concatenate([order[start:stop] for order in plan.order]).tolist())
        assert trained == sorted(np.concatenate([order[start:stop] for order in reference]).tolist())
    loans = plan.loans
    assert loans is None or (loans.src // r != loans.dst // r).all()
    if loans is not None:
        assert all(sample in held[src] for sample, src in zip(loans.sample_id, loans.src))
    for rank in range(m):
        sources = plan.sources(rank)
        order = plan.order[rank]
        assert np.isin(order[sources == FROM_STORE], plan.node_held(rank)).all()
        assert not np.isin(order[sources == FROM_SHARED], np.concatenate(held)).any()
        assert (sources == FROM_SHARED).sum() == plan.reads_shared[rank]
        borrowed = loans.sample_id[loans.dst == rank] if loans is not None else np.empty(0, np.int64)
        assert sorted(order[sources == FROM_LOAN].tolist()) == sorted(borrowed.tolist())
