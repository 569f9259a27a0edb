"""`dataset=digits` (formats/digits.py): scikit-learn's real handwritten digits written as an ImageFolder
with a stratified held-out split, its labels known without reading an image, and `hpcshuffle plan
--dataset` listing a dataset for N and its labels."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hpcshuffle.cli import main
from hpcshuffle.formats import digits, get_format
from hpcshuffle.formats.codec import DatasetOptions


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return get_format("digits").synthesize(tmp_path_factory.mktemp("digits") / "d", seed=0, progress=False, size=16)


def test_digits_are_written_whole_and_split_by_class(root):
    dataset_format = get_format("digits")
    train, val = (dataset_format.scan(root, split) for split in dataset_format.splits)
    assert (len(train), len(val)) == (1438, 359)  # 1,797 real digits, 20 % of each class held out
    assert train.classes == digits.CLASSES
    _, targets = digits.load()
    held = np.bincount(val.labels, minlength=10)
    assert np.array_equal(held, np.round(0.2 * np.bincount(targets)).astype(int))
    names = {relpath.rsplit("/", 1)[1] for relpath in train.relpaths}
    assert not names & {relpath.rsplit("/", 1)[1] for relpath in val.relpaths}  # no digit in both splits
    assert np.array_equal(train.labels, digits.train_labels(0.2, 0))  # known without listing
    assert not np.array_equal(digits.split(targets, 0.2, 1)[1], digits.split(targets, 0.2, 0)[1])  # seed draws
    codec = dataset_format.codec(root, train, DatasetOptions(augment="none"))
    image, label = codec.decode(train.read_bytes(5), train.labels[5], train=True)
    assert tuple(image.shape) == (3, 16, 16) and label == 0


def test_digits_name_bad_arguments(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"val_fraction must lie in \(0, 1\), got 1"):
        get_format("digits").synthesize(tmp_path / "bad", seed=0, progress=False, val_fraction=1)
    with pytest.raises(ValueError, match="size must be >= 8 pixels"):
        get_format("digits").synthesize(tmp_path / "bad", seed=0, progress=False, size=4)
    assert not (tmp_path / "bad").exists()
    main(["synth", "digits", "--out", str(tmp_path / "cli"), "--size", "8"])
    assert f"wrote 1438 training images in 10 classes to {tmp_path / 'cli'}" in capsys.readouterr().out


def test_plan_lists_a_dataset_for_its_size_and_labels(root, capsys, tmp_path):
    args = ["plan", "--workers", "16", "--batch", "8", "--shuffle", "local", "--partition", "contiguous",
            "--epochs", "2", "--quality", "--json"]
    main([*args, "--dataset", str(root), "--format", "digits"])
    listed = json.loads(capsys.readouterr().out)["epochs"]
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps(np.bincount(digits.train_labels()).tolist()))
    main([*args, "--samples", "1438", "--label-counts", str(counts)])
    assert json.loads(capsys.readouterr().out)["epochs"] == listed
    assert listed[0]["mixing"]["labels"]["excess"] > 0.5  # contiguous: a worker holds one or two digits


@pytest.mark.parametrize("extra, message", [
    (["--samples", "100"], "--samples 100 but --dataset .* lists 1438 training samples; drop --samples"),
    (["--format", "deepcam", "--quality"], "deepcam samples carry their labels inside the files"),
    (["--format", "nope"], "unknown dataset format 'nope'"),
])
def test_plan_names_a_dataset_it_cannot_use(root, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--workers", "4", "--shuffle", "local", "--dataset", str(root), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err


def test_plan_without_a_size_says_how_to_give_one(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--workers", "4", "--shuffle", "local"])
    assert "give N with --samples, or --dataset ROOT to list it" in capsys.readouterr().err


def test_dataset_digits_composes_into_a_run_config_that_writes_it_on_first_use():
    from tests.unit.test_config import run_config

    config = run_config("dataset=digits")
    assert (config.dataset.format, config.dataset.augment) == ("digits", "none")  # a flipped digit is not one
    assert config.dataset.synthesize == {"size": 32, "val_fraction": 0.2, "seed": 0}  # one split for every run
