"""Synthetic ImageFolder data and scanning it into a catalog."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from hpcshuffle.cli import main
from hpcshuffle.formats.imagefolder import Catalog, DatasetError, scan
from hpcshuffle.formats.synthetic import synth_imagefolder

SAMPLES, CLASSES, SIZE = 60, 4, 16


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Written once per module; tests that modify the tree copy it first."""
    out = tmp_path_factory.mktemp("synth") / "imagefolder"
    assert synth_imagefolder(out, SAMPLES, CLASSES, image_size=SIZE, seed=0, progress=False) == out
    return out


@pytest.fixture
def catalog(dataset) -> Catalog:
    return scan(dataset, "train")


# -- synth -------------------------------------------------------------------------------------


def test_synth_layout_and_balance(dataset):
    class_dirs = sorted(p.name for p in (dataset / "train").iterdir())
    assert class_dirs == [f"class_{i:03d}" for i in range(CLASSES)]
    train = sorted((dataset / "train").glob("class_*/*.jpg"))
    assert len(train) == SAMPLES
    counts = Counter(p.parent.name for p in train)
    assert set(counts.values()) == {SAMPLES // CLASSES}
    # val: default max(classes, N/5) = 12 images, also one directory per class, balanced
    val = sorted((dataset / "val").glob("class_*/*.jpg"))
    assert len(val) == max(CLASSES, SAMPLES // 5)
    assert sorted(Counter(p.parent.name for p in val).values()) == [3, 3, 3, 3]


def test_synth_files_are_jpegs_of_the_right_size(dataset):
    for path in sorted(dataset.glob("*/class_*/*.jpg")):
        assert path.read_bytes()[:3] == b"\xff\xd8\xff"
        with Image.open(path) as image:
            assert image.format == "JPEG"
            assert image.size == (SIZE, SIZE)
            assert image.mode == "RGB"
            image.load()


def test_synth_is_deterministic(tmp_path, dataset):
    again = synth_imagefolder(tmp_path / "again", 8, CLASSES, image_size=SIZE, seed=0, progress=False)
    other = synth_imagefolder(tmp_path / "other", 8, CLASSES, image_size=SIZE, seed=1, progress=False)
    name = "train/class_001/0000001.jpg"
    assert (again / name).read_bytes() == (dataset / name).read_bytes()
    assert (other / name).read_bytes() != (again / name).read_bytes()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_samples=3, num_classes=4), "--samples (3) must be >= --classes (4)"),
        (dict(num_samples=10, num_classes=1), "--classes must be >= 2"),
        (dict(num_samples=10, num_classes=2, image_size=4), "--size must be >= 8"),
    ],
)
def test_synth_errors(tmp_path, kwargs, message):
    with pytest.raises(ValueError) as err:
        synth_imagefolder(tmp_path / "bad", progress=False, **kwargs)
    assert message in str(err.value)
    assert not (tmp_path / "bad").exists()  # nothing written before the check


def test_synth_cli(tmp_path, capsys):
    main(["synth", "imagefolder", "--out", str(tmp_path / "d"), "--samples", "6", "--classes", "3",
          "--size", "8", "--val-samples", "3"])
    assert "wrote 6 training images in 3 classes" in capsys.readouterr().out
    assert len(list((tmp_path / "d" / "train").glob("*/*.jpg"))) == 6
    assert len(list((tmp_path / "d" / "val").glob("*/*.jpg"))) == 3


def test_synth_cli_samples_below_classes_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "imagefolder", "--out", str(tmp_path / "d"), "--samples", "2", "--classes", "5"])
    assert exit_info.value.code == 2
    assert "--samples (2) must be >= --classes (5)" in capsys.readouterr().err


# -- scan --------------------------------------------------------------------------------------


def test_scan_numbers_samples_in_sorted_order(dataset, catalog):
    assert len(catalog) == SAMPLES
    assert catalog.root == dataset
    assert catalog.classes == tuple(f"class_{i:03d}" for i in range(CLASSES))
    assert list(catalog.relpaths) == sorted(catalog.relpaths)  # class dir, then file name
    for sample_id in range(len(catalog)):
        relpath = catalog.relpaths[sample_id]
        split, class_dir, _ = relpath.split("/")
        assert split == "train"
        assert catalog.labels[sample_id] == catalog.classes.index(class_dir)
        assert catalog.path(sample_id) == dataset / relpath
        assert catalog.path(sample_id).is_file()
        m = catalog.meta(sample_id)
        assert (m.sample_id, m.relpath, m.label) == (sample_id, relpath, catalog.labels[sample_id])
    assert Counter(catalog.labels) == {label: SAMPLES // CLASSES for label in range(CLASSES)}


def test_scan_val_with_train_classes(dataset, catalog):
    val = scan(dataset, "val", catalog.classes)
    assert val.classes == catalog.classes
    assert len(val) == 12
    assert all(r.startswith("val/") for r in val.relpaths)
    for relpath, label in zip(val.relpaths, val.labels):
        assert relpath.split("/")[1] == catalog.classes[label]


def test_scan_is_stable_and_fingerprint_tracks_listing(tmp_path, dataset):
    root = tmp_path / "copy"
    shutil.copytree(dataset, root)
    first, second = scan(root, "train"), scan(root, "train")
    assert first.relpaths == second.relpaths and first.labels == second.labels
    assert first.fingerprint() == second.fingerprint()
    assert len(first.fingerprint()) == 16
    # the fingerprint names the listing, not the root it was found under
    assert scan(dataset, "train").fingerprint() == first.fingerprint()
    # non-images are ignored
    (root / "train" / "class_000" / "notes.txt").write_text("not an image")
    assert scan(root, "train").fingerprint() == first.fingerprint()
    # one more image changes both the numbering and the fingerprint
    shutil.copy(root / "train/class_001/0000001.jpg", root / "train/class_000/0000000a.jpg")
    grown = scan(root, "train")
    assert len(grown) == SAMPLES + 1
    assert grown.relpaths[1] == "train/class_000/0000000a.jpg"
    assert grown.fingerprint() != first.fingerprint()


def test_scan_fingerprint_sees_relabelling(tmp_path, dataset):
    root = tmp_path / "copy"
    shutil.copytree(dataset, root)
    before = scan(root, "train").fingerprint()
    (root / "train" / "class_003").rename(root / "train" / "class_zzz")
    assert scan(root, "train").fingerprint() != before


def test_scan_missing_split_suggests_synth(tmp_path):
    with pytest.raises(DatasetError) as err:
        scan(tmp_path / "nowhere", "train")
    message = str(err.value)
    assert "hpcshuffle synth imagefolder" in message
    assert str(tmp_path / "nowhere") in message


def test_scan_empty_and_foreign_classes(tmp_path, dataset):
    (tmp_path / "empty" / "train").mkdir(parents=True)
    with pytest.raises(DatasetError, match="no class directories"):
        scan(tmp_path / "empty", "train")
    (tmp_path / "empty" / "train" / "c0").mkdir()
    with pytest.raises(DatasetError, match="holds no images"):
        scan(tmp_path / "empty", "train")
    with pytest.raises(DatasetError, match="not in the training split"):
        scan(dataset, "val", ("class_000", "class_001"))
