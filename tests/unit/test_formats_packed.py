"""Packed formats: WebDataset tar shards and DeepCAM samples packed into HDF5 files.

Each packed sample must be the bytes that were packed, label and all, decode to what the same
sample decodes to unpacked, and every way a shard can be broken must name the file and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from hpcshuffle.cli import main
from hpcshuffle.formats import deepcam, imagefolder, packed_h5, webdataset
from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.staging.stage import assess, execute
from hpcshuffle.storage.store import Store

HEIGHT, WIDTH = 32, 48


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A small ImageFolder, listed class by class."""
    out = tmp_path_factory.mktemp("packed") / "folder"
    return imagefolder.synthesize(out, seed=0, progress=False, samples=30, val_samples=9, classes=3, size=16)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "wds"
    return webdataset.synthesize(out, seed=0, progress=False, samples=40, val_samples=8, classes=4, size=16,
                                 shard_samples=12)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "h5"
    return packed_h5.synthesize(out, seed=3, progress=False, samples=5, val_samples=2, height=HEIGHT, width=WIDTH,
                                file_samples=2)


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {member.name: tar.extractfile(member).read() for member in tar if member.isfile()}


def copy(root: Path, tmp_path: Path) -> Path:
    shutil.copytree(root, tmp_path / "copy")
    return tmp_path / "copy"


def write_tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            webdataset.add_member(tar, name, data)


# -- webdataset: listing and bytes -------------------------------------------------------------


def test_webdataset_samples_are_the_image_members_with_their_cls_labels(shards):
    train = webdataset.scan(shards, "train")
    assert len(train) == 40 and train.classes == ("class_000", "class_001", "class_002", "class_003")
    assert train.shards == tuple(f"train/shard-{index:05d}.tar" for index in range(4))
    assert [len(train.shard_samples(shard)) for shard in range(4)] == [12, 12, 12, 4]
    assert [i for shard in range(4) for i in train.shard_samples(shard)] == list(range(40))
    assert Counter(train.labels) == {label: 10 for label in range(4)}
    for shard in range(len(train.shards)):
        packed = members(shards / train.shards[shard])
        for sample_id in train.shard_samples(shard):
            stem, _, name = train.relpaths[sample_id].rpartition("/")
            assert stem == f"train/shard-{shard:05d}" and name.endswith(".jpg")
            assert train.read_bytes(sample_id) == packed[name]
            assert train.labels[sample_id] == int(packed[name.replace(".jpg", ".cls")])
            assert train.stat(sample_id).nbytes == len(packed[name])
            assert train.stat(sample_id).mtime_ns == os.stat(train.path(sample_id)).st_mtime_ns
        # classes mixed in every shard, not one class a shard
        assert len({train.labels[i] for i in train.shard_samples(shard)}) > 1
    val = webdataset.scan(shards, "val")
    assert len(val) == 8 and val.relpaths[0] == "val/shard-00000/0000000.jpg" and val.classes == train.classes


def test_webdataset_index_is_used_while_current_and_the_tars_are_read_once_a_shard_changed(
    shards, tmp_path, monkeypatch
):
    root = copy(shards, tmp_path)
    listed = webdataset.scan(root, "train")
    index = json.loads((root / "train" / "index.json").read_text())
    assert [entry["name"] for entry in index["shards"]] == [Path(name).name for name in listed.shards]
    assert index["shards"][0]["samples"][0] == [
        "0000000", "jpg", listed.offsets[0], listed.sizes[0], listed.labels[0]
    ]
    read = []
    scan_shard = webdataset.scan_shard
    monkeypatch.setattr(webdataset, "scan_shard", lambda path: read.append(path.name) or scan_shard(path))
    assert webdataset.scan(root, "train") == listed and read == []
    # shard 1 replaced by one holding two of its samples: the index no longer describes it
    shard = root / "train" / "shard-00001.tar"
    kept = {name: data for name, data in members(shard).items() if name.startswith(("0000012.", "0000013."))}
    write_tar(shard, kept)
    rescanned = webdataset.scan(root, "train")
    assert read == [f"shard-{index:05d}.tar" for index in range(4)]
    assert len(rescanned) == 30 and list(rescanned.shard_samples(1)) == [12, 13]
    assert rescanned.read_bytes(12) == kept["0000012.jpg"] and rescanned.read_bytes(29) == listed.read_bytes(39)
    with pytest.raises(DatasetError, match=r"shard-00001\.tar changed since the dataset was listed"):
        listed.read_bytes(12)
    # a shard touched but not changed, or a missing index, costs a scan and lists the same
    read.clear()
    os.utime(root / "train" / "shard-00002.tar", ns=(1, 1))
    (root / "train" / "index.json").write_text("{")
    assert webdataset.scan(root, "train").labels == rescanned.labels and len(read) == 4


def test_webdataset_reads_drop_only_their_member_from_the_page_cache(shards, monkeypatch):
    dropped = []
    monkeypatch.setattr("hpcshuffle.formats.catalog.drop_cached", lambda fd, *span: dropped.append(span))
    train = webdataset.scan(shards, "train")
    train.read_bytes(5)
    assert dropped == [(train.offsets[5], train.sizes[5])]
    from dataclasses import replace

    replace(train, uncached=False).read_bytes(5)
    assert len(dropped) == 1


def test_webdataset_decodes_as_imagefolder_does(folder, tmp_path):
    root = tmp_path / "wds"
    main(["pack", "--src", str(folder), "--out", str(root), "--shard-samples", "7"])
    source, shard = imagefolder.scan_split(folder, "val"), webdataset.scan(root, "val")
    for augment, image_size in (("none", None), ("standard", 12)):
        options = DatasetOptions(augment, image_size)
        ours = webdataset.FORMAT.codec(root, webdataset.scan(root, "train"), options)
        theirs = imagefolder.FORMAT.codec(folder, imagefolder.scan_split(folder, "train"), options)
        for sample_id in range(len(shard)):
            original = int(Path(shard.relpaths[sample_id]).stem)  # the key is the ImageFolder id
            for train in (False, True):
                torch.manual_seed(sample_id)
                inputs, label = ours.decode(shard.read_bytes(sample_id), shard.labels[sample_id], train)
                torch.manual_seed(sample_id)
                expected, expected_label = theirs.decode(source.read_bytes(original), source.labels[original], train)
                assert torch.equal(inputs, expected) and label == expected_label


# -- pack --------------------------------------------------------------------------------------


def test_pack_cli_packs_both_splits_shuffled_with_classes_and_index(folder, tmp_path, capsys):
    root = tmp_path / "wds"
    main(["pack", "--src", str(folder), "--out", str(root), "--shard-samples", "8", "--seed", "1"])
    assert ("packed 30 training and 9 validation images in 3 classes into 4 + 2 shards" in
            capsys.readouterr().out)
    assert (root / "classes.txt").read_text().split() == ["class_000", "class_001", "class_002"]
    for split in webdataset.SPLITS:
        source, shard = imagefolder.scan_split(folder, split), webdataset.scan(root, split)
        assert shard.classes == source.classes and (root / split / "index.json").is_file()
        ids = [int(Path(relpath).stem) for relpath in shard.relpaths]
        assert sorted(ids) == list(range(len(source))) and ids != sorted(ids)  # all, once, shuffled
        for sample_id, original in enumerate(ids):
            assert shard.read_bytes(sample_id) == source.read_bytes(original)
            assert shard.labels[sample_id] == source.labels[original]
    in_order = tmp_path / "in_order"
    main(["pack", "--src", str(folder), "--out", str(in_order), "--no-shuffle", "--shard-samples", "10"])
    train = webdataset.scan(in_order, "train")
    assert [int(Path(relpath).stem) for relpath in train.relpaths] == list(range(30))
    assert [len({train.labels[i] for i in train.shard_samples(s)}) for s in range(3)] == [1, 1, 1]


def test_pack_by_bytes_keeps_shards_under_the_limit(folder, tmp_path, capsys):
    root = tmp_path / "wds"
    main(["pack", "--src", str(folder), "--out", str(root), "--shard-bytes", "6KiB"])
    train = webdataset.scan(root, "train")
    assert len(train.shards) > 3
    for shard in range(len(train.shards)):
        ids = train.shard_samples(shard)
        assert sum(webdataset.tar_bytes(train.sizes[i]) + 2 * webdataset.TAR_BLOCK for i in ids) <= 6 * 1024


@pytest.mark.parametrize("argv, message", [
    (["--shard-bytes", "6 parsecs"], "not a size: '6 parsecs'"),
    (["--shard-samples", "0"], "--shard-samples must be >= 1, got 0"),
    (["--shard-samples", "5", "--shard-bytes", "1MB"], "not allowed with argument"),
])
def test_pack_rejects_bad_sizes(folder, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        main(["pack", "--src", str(folder), "--out", str(tmp_path / "wds"), *argv])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "wds").exists()


def test_pack_refuses_to_add_shards_to_shards(folder, shards, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["pack", "--src", str(folder), "--out", str(shards)])
    assert f"{shards / 'train'} already holds shards; write into an empty --out" in capsys.readouterr().err


# -- webdataset: bad shards --------------------------------------------------------------------


def broken(root: Path, files: dict[str, bytes]) -> Path:
    """`root` with shard 0 of train replaced by a tar of `files`."""
    write_tar(root / "train" / "shard-00000.tar", files)
    return root / "train" / "shard-00000.tar"


@pytest.mark.parametrize("files, message", [
    ({"a.jpg": b"x", "a.cls": b"1", "b.png": b"y"}, r"key 'b' has an image but no b\.cls label \(1 such keys\)"),
    ({"a.jpg": b"x", "a.cls": b"one"}, r"a\.cls holds 'one', not a class index"),
    ({"a.jpg": b"x", "a.cls": b"-1"}, r"a\.cls holds '-1', not a class index"),
    ({"a.jpg": b"x", "a.png": b"y", "a.cls": b"1"}, r"key 'a' has two images \(a\.jpg, a\.png\)"),
    ({"a.cls": b"1"}, r"key 'a' has a label but no image"),
])
def test_webdataset_bad_members_name_the_shard_and_key(shards, tmp_path, files, message):
    path = broken(copy(shards, tmp_path), files)
    with pytest.raises(DatasetError, match=message) as err:
        webdataset.scan(tmp_path / "copy", "train")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("cut", ["in the first header", "in an image", "between members", "half"])
def test_webdataset_truncated_shard_is_named(shards, tmp_path, cut):
    root = copy(shards, tmp_path)
    listed = webdataset.scan(root, "train")
    path = root / "train" / "shard-00001.tar"
    data = path.read_bytes()
    size = {"in the first header": 100, "in an image": listed.offsets[13] + 10, "half": len(data) // 2,
            "between members": listed.offsets[13] + webdataset.padded(listed.sizes[13])}[cut]
    path.write_bytes(data[:size])
    with pytest.raises(DatasetError, match=rf"{path} is not a readable tar shard \(truncated or corrupt\?\).*pack"):
        webdataset.scan(root, "train")


def test_webdataset_missing_or_empty_splits_are_named(shards, tmp_path):
    root = copy(shards, tmp_path)
    shutil.rmtree(root / "val")
    with pytest.raises(DatasetError, match=r"WebDataset split .*val not found.*hpcshuffle pack"):
        webdataset.scan(root, "val")
    (root / "val").mkdir()
    with pytest.raises(DatasetError, match=r"val holds no \.tar shards"):
        webdataset.scan(root, "val")
    write_tar(root / "val" / "empty.tar", {"notes.txt": b"no samples"})
    with pytest.raises(DatasetError, match=r"the shards in .*val hold no samples"):
        webdataset.scan(root, "val")


def test_webdataset_class_names(shards, tmp_path):
    root = copy(shards, tmp_path)
    (root / "classes.txt").write_text("cat\ndog\n")
    with pytest.raises(DatasetError, match=r"label 3 but .*classes\.txt names 2 classes"):
        webdataset.scan(root, "train")
    (root / "classes.txt").unlink()
    assert webdataset.scan(root, "train").classes == ("class_0", "class_1", "class_2", "class_3")


# -- packed_h5 ---------------------------------------------------------------------------------


def test_packed_h5_rows_are_deepcam_samples(packed, tmp_path):
    # synth deepcam with the same seed makes the same arrays, one file each
    loose = deepcam.synthesize(tmp_path / "loose", seed=3, progress=False, samples=5, val_samples=2,
                               height=HEIGHT, width=WIDTH)
    assert (packed / "stats.h5").read_bytes() == (loose / "stats.h5").read_bytes()
    options = DatasetOptions("none")
    for split in packed_h5.SPLITS:
        rows, files = packed_h5.scan(packed, split), deepcam.scan(loose, split)
        assert len(rows) == len(files) and rows.labels == (0,) * len(rows) and rows.classes == ()
        ours = packed_h5.FORMAT.codec(packed, packed_h5.scan(packed, "train"), options)
        theirs = deepcam.FORMAT.codec(loose, deepcam.scan(loose, "train"), options)
        for sample_id in range(len(rows)):
            data = rows.read_bytes(sample_id)
            assert rows.stat(sample_id).nbytes == len(data)
            assert rows.relpaths[sample_id].endswith(".h5")
            with h5py.File(packed / rows.shards[rows.sample_shard[sample_id]]) as file:
                fields, labels = deepcam.read_sample(data)
                assert np.array_equal(fields, file["data"][rows.rows[sample_id]])
                assert np.array_equal(labels, file["labels"][rows.rows[sample_id]])
            inputs, target = ours.decode(data, 0, train=False)
            expected, expected_target = theirs.decode(files.read_bytes(sample_id), 0, train=False)
            assert torch.equal(inputs, expected) and torch.equal(target, expected_target)
    train = packed_h5.scan(packed, "train")
    assert train.shards == ("train/packed-00000.h5", "train/packed-00001.h5", "train/packed-00002.h5")
    assert [list(train.shard_samples(shard)) for shard in range(3)] == [[0, 1], [2, 3], [4]]
    assert train.relpaths[3] == "train/packed-00001/00001.h5" and train.rows[3] == 1


@pytest.mark.parametrize("arrays, message", [
    ({"labels": np.zeros((2, 16, 16), np.int8)}, "has no data dataset"),
    ({"data": np.zeros((2, 16, 16, 16), np.float32)}, "has no labels dataset"),
    ({"data": np.zeros((3, 16, 16, 16), np.float32), "labels": np.zeros((2, 16, 16), np.int8)},
     "data has 3 rows but labels has 2"),
    ({"data": np.zeros((2, 16, 16, 3), np.float32), "labels": np.zeros((2, 16, 16), np.int8)},
     r"data \(2, 16, 16, 3\) and labels \(2, 16, 16\); expected \(n, H, W, 16\)"),
])
def test_packed_h5_bad_files_are_named(packed, tmp_path, arrays, message):
    root = copy(packed, tmp_path)
    path = root / "train" / "packed-00001.h5"
    deepcam.write_hdf5(path, arrays)
    with pytest.raises(DatasetError, match=message) as err:
        packed_h5.scan(root, "train")
    assert str(path) in str(err.value)


def test_packed_h5_unreadable_or_missing_files_are_named(packed, tmp_path):
    root = copy(packed, tmp_path)
    path = root / "validation" / "packed-00000.h5"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(DatasetError, match=rf"{path} is not a readable HDF5 file"):
        packed_h5.scan(root, "validation")
    shutil.rmtree(root / "validation")
    with pytest.raises(DatasetError, match="packed DeepCAM split .* not found.*hpcshuffle synth packed_h5"):
        packed_h5.scan(root, "validation")


def test_packed_h5_file_changed_since_listing_is_named(packed, tmp_path):
    root = copy(packed, tmp_path)
    train = packed_h5.scan(root, "train")
    path = root / "train" / "packed-00000.h5"
    with h5py.File(path, "r+") as file:
        file["data"][0] = 0
    with pytest.raises(DatasetError, match="packed-00000.h5 changed since the dataset was listed"):
        train.read_bytes(1)
    assert len(train.read_bytes(2)) == train.stat(2).nbytes  # other files read on


# -- the command line and staging --------------------------------------------------------------


def test_synth_cli_writes_both_packed_formats(tmp_path, capsys):
    main(["synth", "webdataset", "--out", str(tmp_path / "w"), "--samples", "20", "--val-samples", "5",
          "--classes", "4", "--size", "12", "--shard-samples", "6", "--seed", "2"])
    assert f"wrote 20 training images in 4 classes to {tmp_path / 'w'} (train; 5 in val)" in capsys.readouterr().out
    assert len(webdataset.scan(tmp_path / "w", "train").shards) == 4
    main(["synth", "packed_h5", "--out", str(tmp_path / "h"), "--samples", "3", "--val-samples", "1",
          "--height", "16", "--width", "32", "--file-samples", "2"])
    assert f"wrote 3 training samples to {tmp_path / 'h'} (train; 1 in validation)" in capsys.readouterr().out
    assert len(packed_h5.scan(tmp_path / "h", "train").shards) == 2
    with pytest.raises(SystemExit):
        main(["synth", "webdataset", "--out", str(tmp_path / "x"), "--samples", "20", "--shard-samples", "0"])
    assert "--shard-samples must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synth", "packed_h5", "--out", str(tmp_path / "y"), "--samples", "2", "--height", "20"])
    assert "multiples of 16" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_synth_webdataset_is_deterministic(shards, tmp_path):
    again = webdataset.synthesize(tmp_path / "again", seed=0, progress=False, samples=40, val_samples=8, classes=4,
                                  size=16, shard_samples=12)
    for name in ("shard-00000.tar", "shard-00003.tar"):
        assert (again / "train" / name).read_bytes() == (shards / "train" / name).read_bytes()


@pytest.mark.parametrize("name", ["webdataset", "packed_h5"])
def test_packed_samples_stage_into_stores_whole_shards_as_packs(shards, packed, tmp_path, capsys, name):
    root = {"webdataset": shards, "packed_h5": packed}[name]
    main(["stage", "--format", name, "--src", str(root), "--dst", str(tmp_path / "local"), "--shuffle", "local",
          "--workers", "2", "--threads", "2"])
    catalog = {"webdataset": webdataset, "packed_h5": packed_h5}[name].scan(root, "train")
    assert f"copied {len(catalog)} samples" in capsys.readouterr().out
    suffix = {"webdataset": ".jpg", "packed_h5": ".h5"}[name]
    first, second = catalog.shard_samples(0), catalog.shard_samples(1)
    target = [*first, *second[::2]]  # shard 0 whole, every other sample of shard 1
    with Store(tmp_path / "store") as store:
        execute(store, assess(store, target, catalog, threads=2), catalog, threads=2)
        assert len(list(store.packs_dir.iterdir())) == 1  # shard 0, read and kept in one piece
        assert {store.location(i).path for i in first} == {str(next(store.packs_dir.iterdir()))}
        assert sorted(p.name for p in store.samples_dir.iterdir()) == [f"{i:09d}{suffix}" for i in second[::2]]
        assert all(store.read_bytes(i) == catalog.read_bytes(i) and store.intact(i) for i in target)
        store.commit(0, "plan")
    with Store(tmp_path / "store") as store:  # unchanged shards: nothing to copy again
        assert assess(store, target, catalog).to_copy == []

