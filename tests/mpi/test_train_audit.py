"""Real `mpiexec -n K` training runs, checked from their audit against the plan.

At every epoch boundary the stores must hold each sample exactly once, every rank must train
the same number of batches, and a rank must train on exactly what it holds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.cache_sim import rank_trace, simulate
from tests.conftest import BATCH, EPOCHS, SHORT_EPOCHS, SMALL_SAMPLES, audit_by_epoch

pytestmark = pytest.mark.mpi
CACHE_SAMPLES = 20  # per rank, of the 71 it reads per epoch


# every rank count and every q once (not the whole 4 × 4 product, which costs four minutes); the
# 4-rank run is also the uninterrupted reference of tests/chaos
@pytest.mark.parametrize(("ranks", "q"), [(2, 1.0), (3, 0.0), (4, 0.5), (5, 0.1)])
def test_partial_shuffling_never_loses_or_duplicates(trained, ranks, q):
    run_dir = trained(ranks, "shuffle=partial", f"shuffle.q={q}", "audit=true") / "run"
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(EPOCHS))
    plans = list(plan_epochs(PlanSpec(SMALL_SAMPLES, ranks, BATCH, q, 0), "partial", EPOCHS))
    for epoch, rows in audit.items():
        assert [row["rank"] for row in rows] == list(range(ranks))
        held = [i for row in rows for i in row["held"]]
        assert sorted(held) == list(range(SMALL_SAMPLES)), f"epoch {epoch}: a sample is lost or duplicated"
        # what the stores hold is what the plan says, rank by rank
        for row, planned in zip(rows, plans[epoch].held):
            assert row["held"] == planned.tolist()
        lengths = {len(row["trained"]) for row in rows}
        assert lengths == {-(-SMALL_SAMPLES // ranks)}, "ranks trained different numbers of samples"
        for row in rows:
            assert set(row["trained"]) == set(row["held"]), f"rank {row['rank']} trained on what it does not hold"

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["epoch"] for m in metrics] == list(range(EPOCHS))
    iterations = -(-(-(-SMALL_SAMPLES // ranks)) // BATCH)
    for record in metrics:
        samples = record["samples"]
        assert record["iterations"] == iterations
        assert samples["read_shared"] == 0
        assert samples["sent"] == samples["received"]
        assert (samples["sent"] > 0) == (q > 0)
        bound = -(-int((1 + q) * SMALL_SAMPLES * 10) // (ranks * 10))  # ⌈(1+q)·N/M⌉ for one-decimal q
        assert samples["store_peak_rank_max"] <= bound
        assert set(record["time"]) == {"io", "exchange", "fwbw", "allreduce", "epoch", "first_io"}
        for stats in record["time"].values():
            assert stats["min"] <= stats["mean"] <= stats["max"]
        assert 0 < record["time"]["first_io"]["max"] <= record["time"]["io"]["max"]  # one step's wait of the epoch's


@pytest.mark.parametrize("cache", [[], ["cache.policy=reuse_distance", f"cache.samples={CACHE_SAMPLES}"]])
def test_global_shuffling_reads_shared_storage_only(trained, cache):
    """With a planned cache, the reads it serves are the ones its simulation planned."""
    root = trained(3, "shuffle=global", "audit=true", f"epochs={SHORT_EPOCHS}", *cache)
    run_dir = root / "run"
    spec = PlanSpec(SMALL_SAMPLES, 3, BATCH, 1.0, 0)
    plans = list(plan_epochs(spec, "global", SHORT_EPOCHS))
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(SHORT_EPOCHS))
    for epoch, rows in audit.items():
        read = [i for row in rows for i in row["trained"]]
        assert set(read) == set(range(SMALL_SAMPLES))
        assert read == np.concatenate(plans[epoch].order).tolist()
        assert all(row["held"] == [] for row in rows)
    planned = []  # per rank, the simulation the run replayed
    for rank in range(3 if cache else 0):
        trace, epoch_lengths = rank_trace(spec, "global", SHORT_EPOCHS, rank)
        planned.append(simulate(trace, CACHE_SAMPLES, "reuse_distance", epoch_lengths))
    for epoch, record in enumerate(read_jsonl(run_dir / "metrics.jsonl")):
        samples = record["samples"]
        hits = sum(int(result.epoch_hits[epoch]) for result in planned)
        assert (samples["read_cache"], samples["read_local"]) == (hits, 0)
        assert samples["read_shared"] + samples["read_cache"] == 3 * spec.max_share
        if cache:
            assert record["cache"] == {"policy": "reuse_distance", "samples": CACHE_SAMPLES,
                                       "hit_ratio": pytest.approx(hits / (3 * spec.max_share))}
            assert epoch == 0 or hits > 0
    assert not (root / "store" / "rank00000" / "cache").exists(), "the cache is removed at the end"
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["shuffle"] == "global"


def test_corgipile_trains_its_block_stream_from_shared_storage(trained):
    """CorgiPile through the whole loop: the ranks train the planned buffered stream of 10-sample blocks,
    every sample once an epoch (the padding aside), all of it read from shared storage."""
    root = trained(2, "shuffle=corgipile", "shuffle.block=10", "shuffle.buffer=20", "audit=true",
                   f"epochs={SHORT_EPOCHS}")
    spec = PlanSpec(SMALL_SAMPLES, 2, BATCH, 1.0, 0, shard_samples=10, shuffle_buffer=20)
    plans = list(plan_epochs(spec, "corgipile", SHORT_EPOCHS))
    for epoch, rows in audit_by_epoch(root / "run").items():
        assert [row["trained"] for row in rows] == [order.tolist() for order in plans[epoch].order]
        assert set(i for row in rows for i in row["trained"]) == set(range(SMALL_SAMPLES))
    for record in read_jsonl(root / "run" / "metrics.jsonl"):
        assert (record["shuffle"], record["samples"]["read_shared"]) == ("corgipile", 2 * spec.max_share)


@pytest.mark.parametrize("partition", ["random", "contiguous"])
def test_local_shuffling_keeps_its_partition(trained, partition):
    run_dir = trained(4, "shuffle=local", "audit=true", f"epochs={SHORT_EPOCHS}", f"storage.partition={partition}")
    run_dir = run_dir / "run"
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(SHORT_EPOCHS))
    planned = plan_epochs(PlanSpec(SMALL_SAMPLES, 4, BATCH, seed=0, partition=partition), "local", 1)
    for rank, held in enumerate(next(planned).held):
        helds = {tuple(audit[epoch][rank]["held"]) for epoch in audit}
        orders = {tuple(audit[epoch][rank]["trained"]) for epoch in audit}
        assert helds == {tuple(held.tolist())}, "local shuffling changed a partition, or staged another one"
        assert len(orders) == SHORT_EPOCHS, "local shuffling repeated an epoch's order"
    if partition == "contiguous":  # consecutive ids: 211 samples in runs of 53, 53, 53, 52
        assert [audit[0][rank]["held"][0] for rank in range(4)] == [0, 53, 106, 159]
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        assert record["samples"]["read_shared"] == 0
        assert record["samples"]["sent"] == 0
        assert record["partition"] == partition
