"""DLIO beside hpcshuffle (docs/peers.md): hpcshuffle reads the npz files DLIO's generator writes, the
emulated accelerator waits as DLIO's does and still trains a step, and the benchmark's arithmetic on a
DLIO run's outputs (epoch windows, per-step waits, AU by one formula)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hpcshuffle import models
from hpcshuffle.formats import get_format
from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetOptions, SampleError
from hpcshuffle.studies.dlio_peer import DlioWorkload, dlio_au, dlio_epochs

NPZ = get_format("dlio_npz")


def dlio_generated(root: Path, files: int, side: int, samples_per_file: int = 1) -> Path:
    """Files as dlio_benchmark 2.0's NPZGenerator writes them: `np.savez(x=randint(255, (d, d, n), uint8),
    y=[0] * n)` named `img_<i, padded to the digits of files>_of_<files>.npz`, in train/ and an empty valid/."""
    (root / "train").mkdir(parents=True)
    (root / "valid").mkdir()
    rng = np.random.default_rng(3)
    for i in range(files):
        records = rng.integers(0, 255, size=(side, side, samples_per_file), dtype=np.uint8)
        np.savez(root / "train" / f"img_{i:0{len(str(files))}d}_of_{files}.npz", x=records, y=[0] * samples_per_file)
    return root


def test_hpcshuffle_reads_the_files_dlio_generates_byte_for_byte(tmp_path):
    root = dlio_generated(tmp_path / "d", files=12, side=24)
    catalog = NPZ.scan(root, "train")
    assert catalog.relpaths[:2] == ("train/img_00_of_12.npz", "train/img_01_of_12.npz") and len(catalog) == 12
    codec = NPZ.codec(root, catalog, DatasetOptions("none"))
    image, label = codec.decode(catalog.read_bytes(5), catalog.labels[5], train=True)
    stored = np.load(root / catalog.relpaths[5])["x"][:, :, 0]
    assert image.shape == (1, 24, 24) and image.dtype == torch.float32 and label == 0
    assert torch.equal((image[0] * 255).round().to(torch.uint8), torch.from_numpy(stored))
    assert (codec.task, codec.in_channels, codec.num_classes) == ("classify", 1, 1)
    assert not NPZ.class_labels  # the labels are inside the files


def test_what_hpcshuffle_cannot_read_names_the_dlio_setting_that_fixes_it(tmp_path):
    root = dlio_generated(tmp_path / "d", files=4, side=8, samples_per_file=3)
    with pytest.raises(DatasetError, match=r"valid holds no \.npz files .*num_files_eval"):
        NPZ.scan(root, "valid")
    catalog = NPZ.scan(root, "train")
    codec = NPZ.codec(root, catalog, DatasetOptions("none"))
    with pytest.raises(SampleError, match="holds 3 samples.*num_samples_per_file=1"):
        codec.decode(catalog.read_bytes(0), 0, train=True)
    with pytest.raises(SampleError, match="not an npz file"):
        codec.decode(b"PK\x03\x04 cut short", 0, train=True)
    with pytest.raises(DatasetError, match="hpcshuffle synth dlio_npz"):
        NPZ.scan(tmp_path / "nothing", "train")


def test_the_synthesized_layout_is_dlios(tmp_path):
    root = NPZ.synthesize(tmp_path / "s", seed=0, progress=False, samples=10, side=16)
    assert sorted(p.name for p in (root / "train").iterdir())[:2] == ["img_00_of_10.npz", "img_01_of_10.npz"]
    assert len(NPZ.scan(root, "valid")) == 2  # samples/5
    with np.load(root / "train" / "img_03_of_10.npz") as arrays:
        assert arrays["x"].shape == (16, 16, 1) and arrays["x"].dtype == np.uint8 and arrays["y"].tolist() == [0]


def test_the_emulated_accelerator_waits_its_step_and_still_trains():
    model = models.build("emulated", num_classes=1, in_channels=1, step_s=0.05)
    images = torch.rand(3, 1, 16, 16)
    started = time.perf_counter()
    logits = model(images)
    assert time.perf_counter() - started >= 0.05
    assert logits.shape == (3, 1)
    F.mse_loss(logits, torch.ones(3, 1)).backward()  # one class: cross-entropy would be 0 whatever the weights
    assert model.head.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="step_s must be a number > 0"):
        models.build("emulated", num_classes=1, step_s=0)


def write_dlio_run(run_dir: Path) -> None:
    """A 2-rank, 2-epoch DLIO run's outputs as dlio_benchmark 2.0 writes them (the fields read here)."""
    run_dir.mkdir()
    windows = {"1": {"start": "2026-11-29T10:00:00.000000", "end": "2026-11-29T10:00:10.000000"},
               "2": {"start": "2026-11-29T10:00:10.500000", "end": "2026-11-29T10:00:18.500000"}}
    (run_dir / "per_epoch_stats.json").write_text(json.dumps(windows))
    for rank, first in ((0, 3.0), (1, 1.0)):
        epochs = {str(e): {"load": {"block1": [first if e == 1 else 0.5, 0.25, 0.25]},
                           "compute": {"block1": [2.0, 2.0, 2.0]}} for e in (1, 2)}
        (run_dir / f"{rank}_output.json").write_text(json.dumps({"hostname": "node1", **epochs}))


def test_a_dlio_runs_epochs_and_its_au_by_the_formula_hpcshuffle_reports(tmp_path):
    write_dlio_run(tmp_path / "run")
    epochs, problems = dlio_epochs(tmp_path / "run")
    assert problems == []
    assert [e["epoch"] for e in epochs] == [0, 1] and [e["epoch_s"] for e in epochs] == pytest.approx([10.0, 8.0])
    assert epochs[1]["wall"]["start"] - epochs[0]["wall"]["start"] == pytest.approx(10.5)
    assert epochs[0]["io_s"] == pytest.approx(3.5)  # the slowest rank's waits
    assert epochs[0]["first_io_s"] == pytest.approx(2.0)  # the mean rank's first wait
    assert epochs[0]["fwbw_s"] == pytest.approx(6.0)
    # 12 s of compute over 18 s of epochs less the first step's 2 s of I/O
    assert dlio_au(epochs) == pytest.approx(12 / 16)


def test_the_workload_refuses_file_counts_dlios_loader_would_overrun():
    with pytest.raises(ValueError, match="multiple of nodes × batch"):
        DlioWorkload(files=100)
    overrides = DlioWorkload().dlio_overrides(Path("/pfs/x"))
    assert "++workload.dataset.num_files_train=168" in overrides and "++workload.train.computation_time=0.636" in overrides
    train = DlioWorkload().train_overrides("global-unordered")
    assert {"model=emulated", "model.step_s=0.636", "batch_size=7", "loader.io_threads=4", "shuffle=global"} <= set(train)
