"""Staging a store from a catalog: exact copies, resumable, checksummed, change-aware, capacity-checked."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcshuffle import files
from hpcshuffle.cli import main
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats import deepcam
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.imagefolder import scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.staging.stage import (
    StageReport,
    assess,
    demand,
    execute,
    peer_moves,
    replica_ids,
    require_staged,
)
from hpcshuffle.storage.capacity import NodeDemand, check_capacity
from hpcshuffle.storage.layout import rank_dir
from hpcshuffle.storage.store import Store, StoreError

SAMPLES = 60


@pytest.fixture
def catalog(tmp_path) -> Catalog:
    """A private copy per test: several tests modify the source."""
    root = synth_imagefolder(tmp_path / "src", SAMPLES, 4, image_size=16, progress=False)
    return scan(root, "train")


def reconcile(store: Store, target, catalog: Catalog) -> StageReport:
    return execute(store, assess(store, target, catalog, threads=4), catalog, threads=4)


def assert_store_matches(store: Store, ids, catalog: Catalog) -> None:
    assert store.ids() == set(ids)
    for sample_id in ids:
        assert store.read_bytes(sample_id) == catalog.path(sample_id).read_bytes()
        assert (store.meta(sample_id).relpath, store.meta(sample_id).label) == (
            catalog.relpaths[sample_id], catalog.labels[sample_id]
        )
        assert store.intact(sample_id)
    names = sorted(p.name for p in store.samples_dir.iterdir())
    assert names == sorted(f"{i:09d}.jpg" for i in ids)


def test_copies_exactly_the_target_then_nothing(tmp_path, catalog):
    target = list(range(0, SAMPLES, 3))
    with Store(tmp_path / "store") as store:
        report = reconcile(store, target, catalog)
        assert (report.copied, report.removed, report.adopted) == (len(target), 0, 0)
        assert report.copied_bytes == sum(catalog.path(i).stat().st_size for i in target)
        assert_store_matches(store, target, catalog)
        store.commit(0, "plan")
    with Store(tmp_path / "store") as reopened:  # a second run on a complete store copies nothing
        again = reconcile(reopened, target, catalog)
        assert (again.copied, again.removed, again.changed, again.corrupt) == (0, 0, 0, 0)

        new_target = list(range(0, 30))  # keeps 0, 3, ..., 27; drops 30..57; adds the rest of 0..29
        moved = reconcile(reopened, new_target, catalog)
        assert moved.removed == 10 and moved.copied == 20
        assert_store_matches(reopened, new_target, catalog)


def test_accepts_numpy_ids_and_empty_targets(tmp_path, catalog):
    with Store(tmp_path / "store") as store:
        assert reconcile(store, np.array([5, 1, 9], dtype=np.int64), catalog).copied == 3
        report = reconcile(store, [], catalog)
        assert report.removed == 3 and store.ids() == set()


def test_adopts_every_orphan_and_drops_the_unwanted_after(tmp_path, catalog):
    """An orphan may be some other rank's only copy: it is adopted (offered to peers), then dropped."""
    root = tmp_path / "store"
    with Store(root) as store:
        reconcile(store, [0, 1, 2], catalog)
        store.commit(0, "p")
        for i in (40, 41):  # received after the commit, before a crash
            store.add(catalog.meta(i), catalog.path(i).read_bytes())
    with Store(root) as store:
        report = reconcile(store, [0, 1, 40, 50], catalog)
        assert (report.adopted, report.removed, report.copied) == (1, 2, 1)  # 40 kept, 2 and 41 dropped, 50 copied
        assert not (root / "samples" / "000000041.jpg").exists()
        assert_store_matches(store, [0, 1, 40, 50], catalog)


def test_corrupted_copy_is_detected_and_copied_again(tmp_path, catalog):
    root = tmp_path / "store"
    with Store(root) as store:
        reconcile(store, range(10), catalog)
        store.commit(0, "p")
    damaged = root / "samples" / "000000004.jpg"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one flipped byte: only the checksum sees it
    damaged.write_bytes(bytes(data))
    with Store(root) as store:
        work = assess(store, range(10), catalog)
        assert work.corrupt == [4] and work.to_copy == [4] and work.changed == []
        report = execute(store, work, catalog)
        assert (report.copied, report.corrupt) == (1, 1)
        assert_store_matches(store, range(10), catalog)


def test_dataset_changed_since_staging_is_reported_and_recopied(tmp_path, catalog):
    with Store(tmp_path / "store") as store:
        reconcile(store, range(10), catalog)
        source = catalog.path(7)
        source.write_bytes(source.read_bytes() + b"\0")  # appended: size and mtime change
        work = assess(store, range(10), catalog)
        assert work.changed == [7] and work.to_copy == [7]
        execute(store, work, catalog)
        assert store.read_bytes(7) == source.read_bytes()
        stat = source.stat()
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched only: mtime
        assert assess(store, range(10), catalog).changed == [7]


def test_a_vanished_source_file_is_named(tmp_path, catalog):
    catalog.path(3).unlink()
    with Store(tmp_path / "store") as store, pytest.raises(ValueError, match=f"disappeared.*{catalog.relpaths[3]}"):
        assess(store, range(5), catalog)


def test_large_files_are_streamed_in_chunks(tmp_path, catalog, monkeypatch):
    monkeypatch.setattr(files, "CHUNK_BYTES", 97)  # every synthetic JPEG spans many chunks
    with Store(tmp_path / "store") as store:
        reconcile(store, range(6), catalog)
        assert_store_matches(store, range(6), catalog)


def test_capacity_names_the_node_and_the_numbers(tmp_path):
    demands = [NodeDemand("n1", 300 << 20, 0, 0, 1 << 40), NodeDemand("n1", 300 << 20, 0, 0, 1 << 40)]
    check_capacity(tmp_path, demands, 0.5, None)  # plenty of disk
    with pytest.raises(ConfigError) as err:
        check_capacity(tmp_path, demands, 0.5, max_bytes=500 << 20)
    message = str(err.value)
    assert "n1" in message and "500.0 MiB" in message and "600.0 MiB" in message and "(1+0.5)·N/M" in message
    assert "lower q (shuffle.q)" in message and "storage.local_dir" in message and err.value.collective
    short_disk = [NodeDemand("n2", 2 << 30, 1 << 30, 0, (1 << 30) - 1)]
    with pytest.raises(ConfigError, match="n2.*2.00 GiB"):
        check_capacity(tmp_path, short_disk, 0.0, None)


def test_demand_reserves_room_for_the_exchange(tmp_path, catalog):
    with Store(tmp_path / "store") as store:
        work = assess(store, range(20), catalog)
        need = demand("host", store, work, headroom=0.5)
        assert need.need_bytes == work.copy_bytes + int(0.5 * work.target_bytes)
        assert need.free_bytes == shutil.disk_usage(tmp_path).free or need.free_bytes > 0


def test_require_staged_refuses_an_incomplete_store(tmp_path, catalog):
    with Store(tmp_path / "store") as store:
        with pytest.raises(StoreError, match="not staged for this run: 5 samples missing.*hpcshuffle stage"):
            require_staged(assess(store, range(5), catalog), store)
        reconcile(store, range(5), catalog)
        require_staged(assess(store, range(5), catalog), store)


def test_deepcam_hdf5_samples_stage_byte_for_byte(tmp_path):
    root = tmp_path / "deepcam"
    (root / "train").mkdir(parents=True)
    for index in range(6):
        with h5py.File(root / "train" / f"data-{index:04d}.h5", "w") as sample:
            sample["climate/data"] = np.full((16, 24, 16), index, dtype=np.float32)
            sample["climate/labels_0"] = np.zeros((16, 24), dtype=np.int8)
    catalog = deepcam.scan(root, "train")
    assert catalog.relpaths[0] == "train/data-0000.h5" and len(catalog) == 6
    with Store(tmp_path / "store") as store:
        reconcile(store, [1, 4], catalog)
        with h5py.File(store.path(4)) as staged:
            assert staged["climate/data"][0, 0, 0] == 4
        assert store.read_bytes(1) == catalog.path(1).read_bytes()
    with pytest.raises(ValueError, match="DeepCAM split .* not found"):
        deepcam.scan(root, "validation")


def test_unreadable_parts_leave_no_temporaries(tmp_path, catalog):
    with Store(tmp_path / "store") as store:
        reconcile(store, range(4), catalog)
    assert not [p for p in Path(tmp_path / "store").rglob("*") if ".tmp" in p.name]


def test_an_unreadable_source_file_is_named_and_leaves_nothing_behind(tmp_path, catalog):
    source = catalog.path(7)
    source.unlink()
    source.mkdir()  # readable by nobody as a file, even by root (permissions would not stop CI's root)
    with Store(tmp_path / "store") as store:
        with pytest.raises(DatasetError, match=f"cannot read {source} .*Is a directory.*remove it from the dataset"):
            reconcile(store, range(10), catalog)
    assert not [p for p in (tmp_path / "store").rglob("*") if ".tmp" in p.name]


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_peer_moves_take_from_the_lowest_other_holder():
    wants = [ids(5), ids(1, 9), ids(), ids(2)]
    offers = [ids(1, 2), ids(5, 2), ids(1, 5), ids()]
    moves = peer_moves(wants, offers)
    rows = sorted(zip(moves.src.tolist(), moves.dst.tolist(), moves.sample_id.tolist()))
    # 5 -> rank 0 from rank 1 (lowest other), 1 -> rank 1 from rank 0, 9 held by nobody (shared
    # storage), 2 -> rank 3 from rank 0
    assert rows == [(0, 1, 1), (0, 3, 2), (1, 0, 5)]
    assert set(moves.iteration.tolist()) == {0}


def test_peer_moves_take_from_the_wanting_ranks_node_first():
    wants = [ids(), ids(), ids(), ids(7, 8)]
    offers = [ids(7, 8), ids(), ids(7), ids()]
    # ranks 0-1 on node 0, ranks 2-3 on node 1: rank 3 takes 7 from rank 2 (its node), 8 from rank 0
    moves = peer_moves(wants, offers, nodes=[0, 0, 2, 2])
    assert sorted(zip(moves.src.tolist(), moves.dst.tolist(), moves.sample_id.tolist())) == [(0, 3, 8), (2, 3, 7)]


def test_peer_moves_never_send_to_oneself_and_may_be_none():
    assert peer_moves([ids(4), ids()], [ids(4), ids()]) is None  # only rank 0 holds what it wants
    assert peer_moves([ids(), ids()], [ids(1), ids(2)]) is None


# -- `hpcshuffle stage` from one process -------------------------------------------------------


def stage_cli(catalog: Catalog, dst: Path, *flags: str) -> None:
    main(["stage", "--src", str(catalog.root), "--dst", str(dst), "--workers", "4", "--threads", "2", *flags])


def test_stage_cli_stages_each_ranks_epoch0_partition(tmp_path, catalog, capsys):
    stage_cli(catalog, tmp_path / "local", "--shuffle", "partial", "--q", "0.5", "--ranks", "1-2")
    assert "staged 2 ranks" in capsys.readouterr().out
    held = next(plan_epochs(PlanSpec(SAMPLES, 4, 1, 0.5, 0), "partial", 1)).held
    assert not (tmp_path / "local" / "rank00000").exists()
    for rank in (1, 2):
        with Store(rank_dir(tmp_path / "local", rank)) as store:
            assert store.ids() == set(held[rank].tolist()) and store.epoch == 0


def test_stage_cli_stages_node_scope_partitions(tmp_path, catalog, capsys):
    stage_cli(catalog, tmp_path / "local", "--shuffle", "local", "--ranks-per-node", "2", "--ranks", "0-1")
    held = next(plan_epochs(PlanSpec(SAMPLES, 4, 1, 0.0, 0, ranks_per_node=2), "local", 1)).held
    for rank in (0, 1):
        with Store(rank_dir(tmp_path / "local", rank)) as store:
            assert store.ids() == set(held[rank].tolist())


def test_stage_cli_splits_a_node_replica_for_global(tmp_path, catalog, capsys):
    stage_cli(catalog, tmp_path / "local", "--shuffle", "global", "--ranks", "0-2")
    for local_rank in range(3):
        with Store(rank_dir(tmp_path / "local", local_rank)) as store:
            assert store.ids() == set(replica_ids(SAMPLES, local_rank, 3))


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--shuffle", "partial"), "shuffle=partial needs q"),  # no silent q=0
        (("--shuffle", "local", "--q", "0.3"), "shuffle=local means q=0.0, got q=0.3"),
        (("--shuffle", "partial", "--q", "0.5", "--max-gib", "0.00001"), "node-local space on .*lower q"),
    ],
)
def test_stage_cli_refuses_with_the_fix(tmp_path, catalog, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        stage_cli(catalog, tmp_path / "local", *flags)
    assert exit_info.value.code == 2
    assert re.search(f"hpcshuffle stage: error: {message}", capsys.readouterr().err)
