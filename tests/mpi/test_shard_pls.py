"""Shard-granular partial shuffling (`shuffle.unit=shard`) on a real WebDataset, `mpiexec -n 4`:
whole shards partitioned and exchanged, nothing lost or duplicated, the shuffle buffer's order
trained batch by batch, and the bad settings named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from tests.conftest import audit_by_epoch, dead_pack_bytes, run_mpi

pytestmark = pytest.mark.mpi

SAMPLES, SHARD, RANKS, BATCH, EPOCHS, Q, BUFFER = 480, 20, 4, 8, 3, 0.5, 40


def train(tmp_path: Path, ranks: int, *overrides: str) -> tuple[Path, object]:
    run_dir = tmp_path / "run"
    result = run_mpi(ranks, [
        "-m", "hpcshuffle.train", "dataset=synthetic_webdataset", f"dataset.root={tmp_path / 'data'}",
        f"dataset.synthesize.samples={SAMPLES}", f"dataset.synthesize.shard_samples={SHARD}", "model=small_cnn",
        f"batch_size={BATCH}", "progress=false", f"hydra.run.dir={run_dir}", f"storage.local_dir={tmp_path / 'store'}",
        *overrides,
    ], timeout_s=300)
    return run_dir, result


def test_shard_pls_moves_whole_shards_and_trains_the_buffers_order(tmp_path):
    run_dir, result = train(tmp_path, RANKS, "shuffle=partial", f"shuffle.q={Q}", "shuffle.unit=shard",
                            f"shuffle.buffer={BUFFER}", f"epochs={EPOCHS}", "audit=true")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"shuffle.unit=shard: whole shards of {SHARD} samples (" in result.stdout
    assert f"shuffle.buffer={BUFFER} samples: the order a streaming reader holding " in result.stdout
    spec = PlanSpec(SAMPLES, RANKS, BATCH, Q, 0, shard_samples=SHARD, shuffle_buffer=BUFFER)
    plans = list(plan_epochs(spec, "partial", EPOCHS))
    audit = audit_by_epoch(run_dir)
    for epoch, rows in audit.items():
        plan = plans[epoch]
        held = sorted(i for row in rows for i in row["held"])
        assert held == list(range(SAMPLES)), f"epoch {epoch}: a sample is lost or duplicated"
        for row, held, order in zip(rows, plan.held, plan.order):
            assert row["held"] == held.tolist()
            # each batch is the plan's batch: the shuffle buffer's order, trained as planned
            trained = np.asarray(row["trained"])
            for start, stop in spec.steps_from(0):
                assert sorted(trained[start:stop].tolist()) == sorted(order[start:stop].tolist())
        if epoch:  # what a rank gained since the last epoch is whole shards
            for before, after in zip(audit[epoch - 1], rows):
                gained = np.setdiff1d(after["held"], before["held"])
                shards, counts = np.unique(gained // SHARD, return_counts=True)
                assert len(gained) and (counts == SHARD).all()
    for epoch, record in enumerate(read_jsonl(run_dir / "metrics.jsonl")):
        assert (record["shard_samples"], record["shuffle_buffer"]) == (SHARD, BUFFER)
        moved = len(plans[epoch].exchange.sample_id)
        assert record["samples"]["sent"] == record["samples"]["received"] == moved
        assert moved % SHARD == 0
    assert_stores_keep_whole_shards_in_packs(tmp_path / "store", plans[-1].next_held())


def assert_stores_keep_whole_shards_in_packs(store_root: Path, final: list[np.ndarray]) -> None:
    """Staged shards and moved ones are packs (no file per sample), and a store's packs take the
    bytes of the samples it holds: nothing of a shard that left, a trailer and a block's rounding each."""
    for rank_dir, held in zip(sorted(store_root.iterdir()), final, strict=True):
        manifest = json.loads((rank_dir / "manifest.json").read_text())
        assert sorted(int(i) for i in manifest["samples"]) == held.tolist()
        assert not list((rank_dir / "samples").iterdir()), f"{rank_dir}: samples stored one file each"
        assert dead_pack_bytes(rank_dir) == 0
        packs = list((rank_dir / "packs").glob("*.pack"))
        sample_bytes = sum(row[2] for row in manifest["samples"].values())
        allocated = sum(pack.stat().st_blocks * 512 for pack in packs)
        assert allocated <= sample_bytes + len(packs) * 3 * 4096, (rank_dir, allocated, sample_bytes, len(packs))


def test_shards_of_a_dataset_without_shards_are_named(tmp_path, small_dataset):
    run_dir = tmp_path / "run"
    result = run_mpi(2, ["-m", "hpcshuffle.train", "dataset=imagefolder", f"dataset.root={small_dataset}",
                         "shuffle=partial", "shuffle.q=0.5", "shuffle.unit=shard", "epochs=1", "batch_size=8",
                         f"hydra.run.dir={run_dir}", f"storage.local_dir={tmp_path / 'store'}"], timeout_s=120)
    assert result.returncode != 0
    assert "shuffle.unit=shard moves whole shards, but dataset.format=imagefolder keeps one record per sample" in (
        result.stderr)


def test_a_shard_too_large_for_the_exchange_budget_is_named(tmp_path):
    # 480 samples over 2 ranks at q = 0.05: a rank may move 12 samples an epoch, less than one shard of 20
    _, result = train(tmp_path, 2, "shuffle=partial", "shuffle.q=0.05", "shuffle.unit=shard", "epochs=1")
    assert result.returncode != 0
    assert "a shard of 20 samples is more than the 12 samples a node may move per epoch" in result.stderr
    assert "pack smaller shards (hpcshuffle pack --shard-samples)" in result.stderr
