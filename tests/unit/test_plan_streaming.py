"""MosaicML Streaming's orders as plans (plan/streaming.py), without the peers' venv: the orders of
tests/data/streaming_orders.npz, recorded from the package (`record`), cover every sample once an
epoch as Streaming pads, keep each worker's shards across epochs, and become plans that read from
shared storage; `shard_cache_reads` counts whole shards once per worker; a missing venv or a helper
that dies is named. Whether those recorded orders are still the package's is checked where the peers'
venv is (`make peers`); that they are a real StreamingDataset's, by tests/e2e/test_streaming_orders.py.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcshuffle.errors import ConfigError
from hpcshuffle.plan import FROM_SHARED, PlanSpec, plan_epochs, streaming
from hpcshuffle.plan.common import from_shared
from hpcshuffle.plan.streaming import PEERS_PYTHON, shard_cache_reads, worker_orders
from tests.conftest import NO_PEERS_VENV, REPO

RECORDED = REPO / "tests" / "data" / "streaming_orders.npz"
# 103 samples in 20 shards of 5 and one of 3 on 3 workers: shares of 34, 34 and 35 samples, and
# canonical-node boundaries (at 34 and 68) that split a shard
SAMPLES, WORKERS, SHARD = 103, 3, 5
ALGOS, BLOCKS, SEEDS, EPOCHS = ("py1e", "py1br"), (0, 20), (17, 18), 3
RUNS = list(itertools.product(ALGOS, BLOCKS, SEEDS, range(EPOCHS)))  # (algo, block, seed, epoch) recorded


def spec_of(seed: int, block: int) -> PlanSpec:
    return PlanSpec(SAMPLES, WORKERS, 4, 0.0, seed, shard_samples=SHARD, shuffle_buffer=block)


def key(algo: str, block: int, seed: int, epoch: int) -> str:
    return f"{algo}-block{block}-seed{seed}-epoch{epoch}"


def record() -> None:
    """Write RECORDED from the installed package (needs `make peers`):
    python -c 'from tests.unit.test_plan_streaming import record; record()'"""
    orders = {key(algo, block, seed, epoch): worker_orders(algo, spec_of(seed, block), epoch)
              for algo, block, seed, epoch in RUNS}
    np.savez_compressed(RECORDED, **orders)


@pytest.fixture(scope="module")
def recorded() -> dict[str, np.ndarray]:
    with np.load(RECORDED) as orders:
        return {name: orders[name] for name in orders.files}


def shards_of(orders: np.ndarray) -> list[set[int]]:
    return [set((order // SHARD).tolist()) for order in orders]


@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason=NO_PEERS_VENV)
def test_the_recorded_orders_are_the_packages(recorded):
    for algo, block, seed, epoch in RUNS:
        live = worker_orders(algo, spec_of(seed, block), epoch)
        assert np.array_equal(live, recorded[key(algo, block, seed, epoch)]), key(algo, block, seed, epoch)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("block", BLOCKS)
def test_every_sample_once_an_epoch_a_short_share_ends_on_its_last_sample_twice(recorded, algo, block):
    """Streaming pads a node whose share is ⌊N/M⌋ with its own last sample, so each worker trains ⌈N/M⌉ ids."""
    bounds = [node * SAMPLES // WORKERS for node in range(WORKERS + 1)]
    short = [node for node in range(WORKERS) if bounds[node + 1] - bounds[node] < -(-SAMPLES // WORKERS)]
    assert short == [0, 1]
    for seed in SEEDS:
        for epoch in range(EPOCHS):
            orders = recorded[key(algo, block, seed, epoch)]
            assert orders.shape == (WORKERS, -(-SAMPLES // WORKERS))
            assert sorted(set(orders.ravel().tolist())) == list(range(SAMPLES))
            for node, order in enumerate(orders):
                padded = node in short
                assert len(set(order.tolist())) == len(order) - padded
                assert (order[-1] == order[-2]) == padded


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("block", BLOCKS)
def test_a_worker_keeps_its_shards_and_samples_while_their_order_changes(recorded, algo, block):
    """Streaming fixes the shards' assignment to nodes for a run (its seed); each epoch reorders them."""
    for seed in SEEDS:
        epochs = [recorded[key(algo, block, seed, epoch)] for epoch in range(EPOCHS)]
        first = epochs[0]
        for orders in epochs[1:]:
            assert shards_of(orders) == shards_of(first)
            assert [set(order.tolist()) for order in orders] == [set(order.tolist()) for order in first]
            assert not np.array_equal(orders, first)
        # whole shards per worker, but for the few split at a canonical node's boundary
        assert sum(len(shards) for shards in shards_of(first)) <= -(-SAMPLES // SHARD) + WORKERS - 1
    other = [recorded[key(algo, block, seed, 0)] for seed in SEEDS]
    assert shards_of(other[0]) != shards_of(other[1])


def test_a_plan_trains_the_orders_and_reads_every_sample_from_shared_storage(recorded, monkeypatch):
    monkeypatch.setattr(streaming, "worker_orders",
                        lambda algo, spec, epoch: recorded[key(algo, spec.shuffle_buffer, spec.seed, epoch)])
    for algo in ALGOS:
        spec = spec_of(17, 0)
        for plan in plan_epochs(spec, f"streaming_{algo}", EPOCHS):
            assert [order.tolist() for order in plan.order] == recorded[key(algo, 0, 17, plan.epoch)].tolist()
            assert all(len(held) == 0 for held in plan.held) and plan.reads_shared == [spec.max_share] * WORKERS
            assert all((plan.sources(rank) == FROM_SHARED).all() for rank in range(WORKERS))


@pytest.mark.parametrize("algo", ALGOS)
def test_a_streaming_node_reads_its_shards_in_the_first_epoch_only(recorded, algo):
    spec = spec_of(17, 0)
    plans = [from_shared(spec, epoch, recorded[key(algo, 0, 17, epoch)]) for epoch in range(EPOCHS)]
    reads = shard_cache_reads(plans)
    shard_sizes = [min(SHARD, SAMPLES - shard * SHARD) for shard in range(-(-SAMPLES // SHARD))]
    assert reads[0].tolist() == [sum(shard_sizes[shard] for shard in shards) for shards in shards_of(plans[0].order)]
    assert reads[0].sum() >= SAMPLES and not reads[1:].any()


def test_shard_cache_reads_whole_shards_a_worker_has_not_read_before():
    spec = PlanSpec(10, 2, 1, 0.0, 0, shard_samples=4)  # shards {0..3}, {4..7}, {8, 9}
    plans = [from_shared(spec, 0, np.array([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])),
             from_shared(spec, 1, np.array([[9, 8, 0, 1, 2], [0, 5, 6, 7, 8]]))]
    # epoch 0: worker 0 two shards of 4, worker 1 one of 4 and the short one; epoch 1: only what is new
    assert shard_cache_reads(plans).tolist() == [[8, 6], [2, 4]]
    with pytest.raises(ValueError, match=r"plans of epochs 0, 1, 2, ... in order, got epochs \[1\]"):
        shard_cache_reads(plans[1:])


def test_without_the_peers_venv_the_planner_names_make_peers(monkeypatch, tmp_path):
    monkeypatch.setattr(streaming, "PEERS_PYTHON", tmp_path / "missing" / "python")
    monkeypatch.setattr(streaming, "_helpers", {})
    with pytest.raises(ConfigError, match="missing: `make peers` makes it"):
        next(plan_epochs(spec_of(17, 0), "streaming_py1e", 1))


def test_a_helper_that_ends_before_answering_is_named(monkeypatch):
    monkeypatch.setattr(streaming, "PEERS_PYTHON", Path(sys.executable))
    monkeypatch.setattr(streaming, "SERVE", "import sys; sys.exit(3)")
    monkeypatch.setattr(streaming, "_helpers", {})
    with pytest.raises(RuntimeError, match="exited with code 3 before answering"):
        worker_orders("py1e", spec_of(17, 0), 0)
