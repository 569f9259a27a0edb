"""Dataset formats: listing, stage-compatible bytes, decoding, synthesis, the registry, `hpcshuffle synth`."""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from hpcshuffle.cli import main
from hpcshuffle.formats import FORMATS, cifar, deepcam, get_format
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.codec import DatasetOptions, SampleError
from hpcshuffle.staging.stage import assess, execute
from hpcshuffle.storage.store import Store

# tiny datasets: (format, synthesize spec, training / validation samples, classes)
SPECS = {
    "imagefolder": dict(samples=24, val_samples=6, classes=3, size=16),
    "cifar100": dict(samples=60, val_samples=20, classes=10),
    "deepcam": dict(samples=4, val_samples=2, height=32, width=48),
    "webdataset": dict(samples=24, val_samples=6, classes=3, size=16, shard_samples=10),
    "packed_h5": dict(samples=5, val_samples=2, height=32, width=48, file_samples=2),
}
DEEPCAM_SHAPE = (SPECS["deepcam"]["height"], SPECS["deepcam"]["width"])
SEGMENT = ("deepcam", "packed_h5")  # DeepCAM's arrays, labels inside the samples
IMAGES = ("imagefolder", "webdataset")  # JPEGs of any size, decoded alike


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    """One synthetic dataset per format, written once per module; tests that modify one copy it."""
    out = tmp_path_factory.mktemp("formats")
    return {name: FORMATS[name].synthesize(out / name, seed=0, progress=False, **spec) for name, spec in SPECS.items()}


@pytest.fixture(scope="module")
def cifar_binary(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("formats") / "cifar_binary"
    return cifar.synthesize(out, seed=0, progress=False, layout="binary", **SPECS["cifar100"])


def catalogs(name: str, root: Path) -> tuple[Catalog, Catalog]:
    dataset_format = FORMATS[name]
    return tuple(dataset_format.scan(root, split) for split in dataset_format.splits)


def decode(name: str, root: Path, augment: str, sample_id: int = 0, train: bool = True, split: int = 0):
    image_size = 16 if name in IMAGES and augment == "standard" else None
    dataset_format = FORMATS[name]
    train_catalog, val_catalog = catalogs(name, root)
    catalog = (train_catalog, val_catalog)[split]
    codec = dataset_format.codec(root, train_catalog, DatasetOptions(augment, image_size))
    return codec, codec.decode(catalog.read_bytes(sample_id), catalog.labels[sample_id], train)


# -- the registry ------------------------------------------------------------------------------


def test_registry_names_the_formats_and_their_splits():
    assert {"imagefolder", "cifar100", "deepcam", "webdataset", "packed_h5"} <= set(FORMATS)
    assert FORMATS["imagefolder"].splits == ("train", "val")
    assert FORMATS["cifar100"].splits == ("train", "test")
    assert FORMATS["deepcam"].splits == FORMATS["packed_h5"].splits == ("train", "validation")
    assert FORMATS["webdataset"].splits == ("train", "val")
    assert get_format("cifar100") is FORMATS["cifar100"]
    with pytest.raises(ValueError, match=r"unknown dataset format 'cifar'.*'cifar100'.*'deepcam'.*'imagefolder'"):
        get_format("cifar")


# -- listing and bytes -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPECS)
def test_scan_lists_both_splits(roots, name):
    spec = SPECS[name]
    train, val = catalogs(name, roots[name])
    assert (len(train), len(val)) == (spec["samples"], spec["val_samples"])
    if name in SEGMENT:  # labels live inside the files
        assert train.classes == () and set(train.labels) == set(val.labels) == {0}
        return
    assert len(train.classes) == spec["classes"] and val.classes == train.classes
    assert Counter(train.labels) == {label: spec["samples"] // spec["classes"] for label in range(spec["classes"])}
    assert set(val.labels) <= set(range(spec["classes"]))


@pytest.mark.parametrize("name", SPECS)
def test_catalog_bytes_are_what_staging_copies(roots, name):
    for catalog in catalogs(name, roots[name]):
        for sample_id in (0, len(catalog) - 1):
            data = catalog.read_bytes(sample_id)
            assert b"".join(catalog.read_chunks(sample_id)) == data
            assert catalog.stat(sample_id).nbytes == len(data) > 0
            assert catalog.stat(sample_id).mtime_ns == os.stat(catalog.path(sample_id)).st_mtime_ns


def test_cifar_samples_are_records_inside_the_container(roots):
    train, test = catalogs("cifar100", roots["cifar100"])
    assert train.relpaths[12] == "train/00012.cifar" and test.relpaths[0] == "test/00000.cifar"
    assert train.path(12) == roots["cifar100"] / "cifar-100-python" / "train"
    for sample_id in range(len(train)):
        record = train.read_bytes(sample_id)
        assert len(record) == cifar.RECORD_BYTES
        assert record[1] == train.labels[sample_id] and record[0] == record[1] // 5  # fine, coarse
    assert train.classes[:2] == ("class_000", "class_001")


def test_cifar_layouts_give_identical_records(roots, cifar_binary):
    for python, binary in zip(catalogs("cifar100", roots["cifar100"]), catalogs("cifar100", cifar_binary)):
        assert binary.path(0).name in ("train.bin", "test.bin") and binary.layout == "binary"
        assert (python.relpaths, python.labels, python.classes) == (binary.relpaths, binary.labels, binary.classes)
        assert all(python.read_bytes(i) == binary.read_bytes(i) for i in range(len(python)))
        assert python.fingerprint() == binary.fingerprint()  # same samples, same stores


def test_cifar_root_may_be_the_layout_directory(roots, cifar_binary):
    for root in (roots["cifar100"] / "cifar-100-python", cifar_binary / "cifar-100-binary"):
        catalog = cifar.scan(root, "test")
        assert catalog.root == root and catalog.read_bytes(3) == cifar.scan(root.parent, "test").read_bytes(3)


def test_cifar_catalog_pickles_small_and_reads_after_unpickling(tmp_path):
    root = cifar.synthesize(tmp_path / "c", seed=1, progress=False, samples=1000, val_samples=100)
    catalog = cifar.scan(root, "train")
    record = catalog.read_bytes(999)  # the container is loaded now, in this process's cache
    blob = pickle.dumps(catalog)
    assert len(blob) < 100_000
    cifar._RECORDS.clear()  # as in a fresh process (another rank, a spawned loader worker)
    again = pickle.loads(blob)
    assert again == catalog and again.read_bytes(999) == record


def test_cifar_fingerprint_tells_datasets_apart(tmp_path, roots):
    train = cifar.scan(roots["cifar100"], "train")
    other = cifar.synthesize(tmp_path / "other", seed=1, progress=False, **SPECS["cifar100"])
    assert cifar.scan(other, "train").fingerprint() != train.fingerprint()
    assert cifar.scan(roots["cifar100"], "test").fingerprint() != train.fingerprint()


def test_cifar_container_changed_since_listing_is_named(tmp_path, roots):
    root = tmp_path / "c"
    shutil.copytree(roots["cifar100"], root)
    catalog = cifar.scan(root, "train")
    container = catalog.path(0)
    catalog.read_bytes(0)
    info = container.stat()
    os.utime(container, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    assert catalog.stat(0).mtime_ns == info.st_mtime_ns + 10**9  # staging sees the change ...
    with pytest.raises(DatasetError, match=f"{container} changed since the dataset was listed"):
        catalog.read_bytes(0)  # ... and never stages records the listing does not describe
    with pytest.raises(IndexError):
        catalog.read_bytes(len(catalog))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "cifar-100-python" / "meta").unlink(), "no CIFAR-100 dataset under"),
        (lambda d: (d / "cifar-100-python" / "test").unlink(), "CIFAR-100 split .*test not found"),
        (lambda d: (d / "cifar-100-python" / "test").write_bytes(b"\x80\x02garbage"), "not a readable CIFAR-100"),
    ],
)
def test_cifar_bad_directories_are_named(tmp_path, roots, damage, message):
    root = tmp_path / "c"
    shutil.copytree(roots["cifar100"], root)
    damage(root)
    with pytest.raises(DatasetError, match=message):
        cifar.scan(root, "test")


def test_cifar_truncated_binary_container_is_named(tmp_path, cifar_binary):
    root = tmp_path / "c"
    shutil.copytree(cifar_binary, root)
    container = root / "cifar-100-binary" / "train.bin"
    container.write_bytes(container.read_bytes()[:-100])
    with pytest.raises(DatasetError, match=r"not a whole number of 3074-byte .* truncated"):
        cifar.scan(root, "train")
    with pytest.raises(DatasetError, match="splits are"):
        cifar.scan(root, "validation")


def test_imagefolder_val_is_labelled_with_the_training_classes(roots, tmp_path):
    root = tmp_path / "i"
    shutil.copytree(roots["imagefolder"], root)
    shutil.rmtree(root / "val" / "class_000")  # a class missing from val must not shift the others
    val = FORMATS["imagefolder"].scan(root, "val")
    assert val.classes == FORMATS["imagefolder"].scan(root, "train").classes
    assert set(val.labels) == {1, 2}


# -- decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("augment", ["standard", "flip", "none"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name", SPECS)
def test_decode_shapes_dtypes_and_targets(roots, name, augment, train):
    torch.manual_seed(0)
    codec, (inputs, target) = decode(name, roots[name], augment, sample_id=1, train=train)
    assert inputs.dtype == torch.float32 and torch.isfinite(inputs).all()
    if name in SEGMENT:
        assert (codec.task, codec.in_channels, codec.num_classes) == ("segment", 16, 3)
        assert inputs.shape == (16, *DEEPCAM_SHAPE)
        assert 0 <= inputs.min() and inputs.max() <= 1  # training data, scaled by its own min/max
        assert target.shape == DEEPCAM_SHAPE and target.dtype == torch.int64
        assert set(target.unique().tolist()) <= {0, 1, 2}
        return
    side = {"imagefolder": 16, "webdataset": 16, "cifar100": 32}[name]
    assert (codec.task, codec.in_channels, codec.num_classes) == ("classify", 3, SPECS[name]["classes"])
    assert inputs.shape == (3, side, side)
    assert target == catalogs(name, roots[name])[0].labels[1]


@pytest.mark.parametrize("name", SPECS)
def test_evaluation_is_deterministic_and_training_flips(roots, name):
    _, (evaluated, _) = decode(name, roots[name], "flip", train=False)
    torch.manual_seed(0)
    outcomes = set()
    for _ in range(12):
        inputs, target = decode(name, roots[name], "flip", train=True)[1]
        assert torch.equal(decode(name, roots[name], "flip", train=False)[1][0], evaluated)
        flipped = torch.equal(inputs, evaluated.flip(-1)) and not torch.equal(inputs, evaluated)
        assert flipped or torch.equal(inputs, evaluated)
        if name in SEGMENT:  # the labels turn with the fields
            unflipped = decode(name, roots[name], "none", train=True)[1][1]
            assert torch.equal(target, unflipped.flip(-1) if flipped else unflipped)
        outcomes.add(flipped)
    assert outcomes == {True, False}


def test_cifar_pixels_round_trip_without_augmentation(roots):
    catalog = cifar.scan(roots["cifar100"], "train")
    _, (inputs, _) = decode("cifar100", roots["cifar100"], "none", sample_id=5, train=True)
    mean, std = torch.tensor(cifar.CIFAR100_MEAN)[:, None, None], torch.tensor(cifar.CIFAR100_STD)[:, None, None]
    pixels = np.frombuffer(catalog.read_bytes(5)[2:], dtype=np.uint8).reshape(3, 32, 32)
    assert np.array_equal(((inputs * std + mean) * 255).round().to(torch.uint8).numpy(), pixels)


def test_standard_augmentation_crops_differently_per_draw(roots):
    for name in ("imagefolder", "cifar100"):
        draws = []
        for seed in range(4):
            torch.manual_seed(seed)
            draws.append(decode(name, roots[name], "standard", train=True)[1][0])
        assert not all(torch.equal(draws[0], draw) for draw in draws[1:])


def test_imagefolder_sizes(roots):
    root = roots["imagefolder"]
    train = FORMATS["imagefolder"].scan(root, "train")
    with pytest.raises(ValueError, match=r"dataset\.image_size must be set"):
        FORMATS["imagefolder"].codec(root, train, DatasetOptions("standard"))
    for augment in ("standard", "flip", "none"):
        codec = FORMATS["imagefolder"].codec(root, train, DatasetOptions(augment, image_size=24))
        for is_train in (True, False):
            assert codec.decode(train.read_bytes(0), 0, is_train)[0].shape == (3, 24, 24)


def test_cifar_image_size_resizes(roots):
    train = cifar.scan(roots["cifar100"], "train")
    codec = cifar.make_codec(roots["cifar100"], train, DatasetOptions("standard", image_size=64))
    assert codec.decode(train.read_bytes(0), train.labels[0], True)[0].shape == (3, 64, 64)


def test_deepcam_keeps_the_stored_size(roots):
    train = deepcam.scan(roots["deepcam"], "train")
    with pytest.raises(ValueError, match=r"dataset\.image_size=null"):
        deepcam.make_codec(roots["deepcam"], train, DatasetOptions("none", image_size=32))


# -- bad samples -------------------------------------------------------------------------------


def hdf5_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as sample:
        for key, array in arrays.items():
            sample[key] = array
    return buffer.getvalue()


def test_corrupt_images_raise_sample_error(roots):
    codec, _ = decode("imagefolder", roots["imagefolder"], "none")
    jpeg = FORMATS["imagefolder"].scan(roots["imagefolder"], "train").read_bytes(0)
    for data in (jpeg[: len(jpeg) // 2], b"not an image", b""):
        with pytest.raises(SampleError, match="not a readable JPEG/PNG image"):
            codec.decode(data, 0, True)


def test_corrupt_cifar_records_raise_sample_error(roots):
    codec, _ = decode("cifar100", roots["cifar100"], "standard")
    record = cifar.scan(roots["cifar100"], "train").read_bytes(0)
    for data in (record[:-1], record + b"\0", b""):
        with pytest.raises(SampleError, match=f"record is 3074 bytes, got {len(data)}"):
            codec.decode(data, record[1], True)
    with pytest.raises(SampleError, match="differs from the catalog's"):
        codec.decode(record, (record[1] + 1) % 10, False)


def test_corrupt_deepcam_samples_raise_sample_error(roots):
    codec, _ = decode("deepcam", roots["deepcam"], "none")
    good = deepcam.scan(roots["deepcam"], "train").read_bytes(0)
    fields = np.zeros((*DEEPCAM_SHAPE, 16), np.float32)
    labels = np.zeros(DEEPCAM_SHAPE, np.int8)
    cases = [
        (good[: len(good) // 2], "not a readable HDF5 sample"),
        (b"not hdf5 at all", "not a readable HDF5 sample"),
        (hdf5_bytes({"climate/data": fields}), "no climate/labels_0 dataset"),
        (hdf5_bytes({"climate/labels_0": labels}), "no climate/data dataset"),
        (hdf5_bytes({"climate/data": fields[..., :15], "climate/labels_0": labels}), r"\(32, 48, 15\).*\(H, W, 16\)"),
        (hdf5_bytes({"climate/data": fields, "climate/labels_0": labels[:, :40]}), r"labels_0 has shape \(32, 40\)"),
        (hdf5_bytes({"climate/data": fields, "climate/labels_0": labels + 3}), r"classes 3\.\.3; expected 0\.\.2"),
    ]
    for data, message in cases:
        with pytest.raises(SampleError, match=message):
            codec.decode(data, 0, True)


@pytest.mark.parametrize(
    "stats, message",
    [
        (None, "stats.h5 not found"),
        ({"climate/minval": np.zeros(16, np.float32)}, "unreadable"),
        ({"climate/minval": np.zeros(15, np.float32), "climate/maxval": np.ones(15, np.float32)}, r"both be \(16,\)"),
        ({"climate/minval": np.zeros(16, np.float32), "climate/maxval": np.eye(16, dtype=np.float32)[3]},
         r"channels \[0, 1, 2, 4,"),
    ],
)
def test_deepcam_bad_stats_name_the_fix(tmp_path, roots, stats, message):
    root = tmp_path / "d"
    shutil.copytree(roots["deepcam"], root)
    (root / "stats.h5").unlink()
    if stats is not None:
        (root / "stats.h5").write_bytes(hdf5_bytes(stats))
    with pytest.raises(DatasetError, match=message) as err:
        deepcam.make_codec(root, deepcam.scan(root, "train"), DatasetOptions())
    assert "hpcshuffle synth deepcam" in str(err.value)


# -- synthesis ---------------------------------------------------------------------------------


def test_deepcam_synth_follows_the_reference_layout(roots):
    root = roots["deepcam"]
    train, val = catalogs("deepcam", root)
    reference_name = re.compile(r"(train|validation)/data-\d{4}-\d{2}-\d{2}-\d{2}-1\.h5")
    assert all(reference_name.fullmatch(relpath) for relpath in train.relpaths + val.relpaths)
    assert not set(Path(r).name for r in train.relpaths) & set(Path(r).name for r in val.relpaths)
    fields, labels = zip(*(deepcam.read_sample(train.read_bytes(i)) for i in range(len(train))))
    fields = np.stack(fields)
    with h5py.File(root / "stats.h5") as stats:
        assert np.array_equal(stats["climate/minval"][...], fields.min(axis=(0, 1, 2)))
        assert np.array_equal(stats["climate/maxval"][...], fields.max(axis=(0, 1, 2)))
        wide = fields.astype(np.float64)
        assert np.allclose(stats["climate/mean"][...], wide.mean(axis=(0, 1, 2)), rtol=1e-5)
        assert np.allclose(stats["climate/sqmean"][...], np.square(wide).mean(axis=(0, 1, 2)), rtol=1e-5)
    shares = np.bincount(np.concatenate([label.ravel() for label in labels]), minlength=3) / sum(map(np.size, labels))
    assert shares[0] > 0.8 and shares[2] > 0.005 and shares[1] > 0.003  # background dominates, both features present
    # learnable: a feature raises its signature channel well above the background
    tmq = fields[..., deepcam.CHANNEL["TMQ"]]
    labels = np.stack(labels)
    assert tmq[labels == 2].mean() > tmq[labels == 0].mean() + 1.5 * deepcam.VARIABLES[0][2]


def test_synthesis_is_deterministic(tmp_path, roots):
    again = FORMATS["deepcam"].synthesize(tmp_path / "d", seed=0, progress=False, **SPECS["deepcam"])
    relpath = deepcam.scan(again, "train").relpaths[1]
    with h5py.File(again / relpath) as new, h5py.File(roots["deepcam"] / relpath) as old:
        assert np.array_equal(new["climate/data"][...], old["climate/data"][...])
    other = cifar.synthesize(tmp_path / "c", seed=5, progress=False, **SPECS["cifar100"])
    assert cifar.scan(other, "train").read_bytes(0) != cifar.scan(roots["cifar100"], "train").read_bytes(0)


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("cifar100", dict(samples=10, layout="zip"), r"--layout must be one of \('python', 'binary'\), got 'zip'"),
        ("cifar100", dict(samples=10, classes=1), r"--classes must be in \[2, 100\]"),
        ("cifar100", dict(samples=200, classes=101), r"--classes must be in \[2, 100\].*got 101"),
        ("cifar100", dict(samples=5, classes=10), r"--samples \(5\) must be >= --classes \(10\)"),
        ("cifar100", dict(samples=10, classes=2, val_samples=0), "--val-samples must be >= 1, got 0"),
        ("deepcam", dict(samples=2, height=30, width=48), "multiples of 16.*got 30 x 48"),
        ("deepcam", dict(samples=2, height=32, width=0), "multiples of 16.*got 32 x 0"),
        ("deepcam", dict(samples=0, height=32, width=32), "--samples must be >= 1"),
        ("deepcam", dict(samples=2, val_samples=0, height=32, width=32), "--val-samples must be >= 1"),
        ("imagefolder", dict(samples=2, classes=5), r"--samples \(2\) must be >= --classes \(5\)"),
    ],
)
def test_synthesis_rejects_bad_arguments(tmp_path, name, spec, message):
    with pytest.raises(ValueError, match=message):
        FORMATS[name].synthesize(tmp_path / "bad", seed=0, progress=False, **spec)
    assert not (tmp_path / "bad").exists()  # checked before anything is written


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["python", "binary"])
def test_synth_cifar_cli(tmp_path, capsys, layout):
    main(["synth", "cifar", "--out", str(tmp_path / "c"), "--samples", "20", "--val-samples", "4",
          "--classes", "5", "--layout", layout, "--seed", "3"])
    directory = tmp_path / "c" / f"cifar-100-{layout}"
    assert f"wrote 20 training records in 5 classes to {directory} (train; 4 in test)" in capsys.readouterr().out
    main(["synth", "cifar100", "--out", str(tmp_path / "alias"), "--samples", "20", "--val-samples", "4",
          "--classes", "5", "--layout", layout, "--seed", "3"])
    assert cifar.scan(tmp_path / "alias", "train").read_bytes(7) == cifar.scan(tmp_path / "c", "train").read_bytes(7)


def test_synth_deepcam_cli(tmp_path, capsys):
    main(["synth", "deepcam", "--out", str(tmp_path / "d"), "--samples", "3", "--val-samples", "1",
          "--height", "16", "--width", "32"])
    assert f"wrote 3 training samples to {tmp_path / 'd'} (train; 1 in validation)" in capsys.readouterr().out
    assert (tmp_path / "d" / "stats.h5").is_file()
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "deepcam", "--out", str(tmp_path / "e"), "--samples", "3", "--height", "40"])
    assert exit_info.value.code == 2
    assert "--height and --width must be positive multiples of 16" in capsys.readouterr().err


def test_stage_cli_takes_any_format_and_its_training_split(tmp_path, roots, capsys):
    main(["stage", "--format", "cifar100", "--src", str(roots["cifar100"]), "--dst", str(tmp_path / "local"),
          "--shuffle", "local", "--workers", "2", "--threads", "2"])
    assert "copied 60 samples" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "local").glob("rank*/samples/*"))
    assert len(names) == 60 and all(name.endswith(".cifar") for name in names)


# -- staging -----------------------------------------------------------------------------------


def test_cifar_records_stage_into_a_store_byte_for_byte(tmp_path, cifar_binary):
    catalog = cifar.scan(cifar_binary, "train")
    target = list(range(0, len(catalog), 3))
    with Store(tmp_path / "store") as store:
        report = execute(store, assess(store, target, catalog, threads=4), catalog, threads=4)
        assert (report.copied, report.copied_bytes) == (len(target), len(target) * cifar.RECORD_BYTES)
        assert sorted(p.name for p in store.samples_dir.iterdir()) == [f"{i:09d}.cifar" for i in target]
        for sample_id in target:
            assert store.read_bytes(sample_id) == catalog.read_bytes(sample_id)
            assert store.meta(sample_id).label == catalog.labels[sample_id] and store.intact(sample_id)
        store.commit(0, "plan")
    with Store(tmp_path / "store") as store:  # a second staging finds everything in place
        work = assess(store, target, catalog)
        assert (work.to_copy, work.changed, work.corrupt) == ([], [], [])
