"""Every dataset format trains end to end: `mpiexec -n 2`, partial shuffling, one short epoch on the CPU.

The synthetic datasets are made by the run itself (dataset.synthesize), in the real layouts:
JPEG ImageFolder, CIFAR-100 python pickles, DeepCAM HDF5 with stats.h5, JPEGs in WebDataset tar
shards, DeepCAM samples packed into HDF5 files.
"""

from __future__ import annotations

import math

import pytest

from hpcshuffle.files import read_jsonl
from tests.conftest import audit_by_epoch, run_mpi

pytestmark = pytest.mark.mpi

CASES = {
    # dataset config, model, overrides that keep the run small, the validation keys it reports
    "imagefolder": ("synthetic", "small_cnn", ["dataset.synthesize.samples=96"], {"val_top1", "val_top5"}),
    "cifar100": ("synthetic_cifar100", "small_cnn", ["dataset.synthesize.samples=200", "dataset.synthesize.val_samples=50"],
                 {"val_top1", "val_top5"}),
    "deepcam": ("synthetic_deepcam", "deepcam_small", ["dataset.synthesize.samples=16", "dataset.synthesize.val_samples=4",
                "batch_size=2", "optim.warmup=2", "optim.milestones=[6]"], {"val_iou", "val_pixel_accuracy"}),
    "webdataset": ("synthetic_webdataset", "small_cnn", ["dataset.synthesize.samples=96",
                   "dataset.synthesize.shard_samples=16"], {"val_top1", "val_top5"}),
    "packed_h5": ("synthetic_packed_h5", "deepcam_small", ["dataset.synthesize.samples=16",
                  "dataset.synthesize.val_samples=4", "dataset.synthesize.file_samples=4", "batch_size=2",
                  "optim.warmup=2", "optim.milestones=[6]"], {"val_iou", "val_pixel_accuracy"}),
    "memory": ("synthetic-in-memory", "small_cnn", ["dataset.synthesize.samples=64", "dataset.synthesize.classes=10",
               "dataset.synthesize.size=32"], {"val_top1", "val_top5"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_epoch_of_partial_shuffling(tmp_path, name):
    dataset, model, overrides, scores = CASES[name]
    run_dir = tmp_path / "run"
    result = run_mpi(2, [
        "-m", "hpcshuffle.train", f"dataset={dataset}", f"dataset.root={tmp_path / 'data'}", f"model={model}",
        "shuffle=partial", "shuffle.q=0.5", "epochs=1", "audit=true", "progress=false",
        f"hydra.run.dir={run_dir}", f"storage.local_dir={tmp_path / 'store'}", *overrides,
        *([] if any(o.startswith("batch_size=") for o in overrides) else ["batch_size=8"]),
    ], timeout_s=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert scores <= set(record), f"{name} reported {sorted(record)}"
    assert math.isfinite(record["train_loss"]) and record["lr"] > 0
    assert record["samples"]["sent"] == record["samples"]["received"] > 0
    held = [i for row in audit_by_epoch(run_dir)[0] for i in row["held"]]
    assert sorted(held) == list(range(record["num_samples"])), "a sample was lost or duplicated"
    # label skew from the listing's classes; DeepCAM's labels are per pixel, inside the files: said once, none recorded
    if model == "deepcam_small":
        assert "labels" not in record["mixing"] and result.stdout.count("has no class labels") == 1
    else:
        assert 0 <= record["mixing"]["labels"]["same_class"] <= 1 and "has no class labels" not in result.stdout
