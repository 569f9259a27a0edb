"""Bad input ends every rank with a message that names the problem — never a hang.

Two ranks are enough to show that every rank ends (and cost half the start-up of four). The
messages of the many config refusals are checked in-process (tests/unit/test_bad_run.py); here,
that a refusal ends a real job, every rank of it, without a traceback.
"""

from __future__ import annotations

import sys

import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.formats.synthetic import synth_imagefolder
from tests.conftest import run_mpi, train_args

pytestmark = pytest.mark.mpi
RANKS = 2


def fails_with(result, *fragments: str) -> None:
    assert result.returncode != 0, result.stdout[-2000:]
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        # one of each way a refusal reaches every rank: the config parsed alike on all of them, a check
        # rank 0 makes and shares (the dataset), and one that needs this job's ranks (tests/unit/
        # test_bad_run.py names every other refusal in-process)
        (["shuffle=partial", "shuffle.q=1.5"], ["shuffle.q must be in [0, 1], got 1.5"]),
        (["dataset.root=/nonexistent/imagenet"], ["/nonexistent/imagenet/train not found", "hpcshuffle synth"]),
        (["shuffle.virtual_workers=4"], ["trains 4 workers in one process, but this job has 2", "no mpiexec -n"]),
    ],
)
def test_bad_config_is_named(small_dataset, tmp_path, overrides, fragments):
    args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", *overrides)
    fails_with(run_mpi(RANKS, args, timeout_s=120), *fragments)


def test_more_ranks_than_samples(tmp_path):
    tiny = synth_imagefolder(tmp_path / "tiny", RANKS, num_classes=2, num_val_samples=2, image_size=8, progress=False)
    args = train_args(tiny, tmp_path / "run", tmp_path / "store", "batch_size=1")
    fails_with(run_mpi(RANKS + 1, args, timeout_s=120), f"more workers ({RANKS + 1}) than samples ({RANKS})")


def test_ranks_with_different_seeds_are_detected(small_dataset, tmp_path):
    """MPMD launch: rank 0 gets seed=1, rank 1 seed=2 (as a broken job script would)."""
    common = train_args(small_dataset, tmp_path / "run", tmp_path / "store")
    args = [*common, "seed=1", ":", "-n", "1", sys.executable, *common, "seed=2"]
    fails_with(run_mpi(1, args, timeout_s=120), "ranks disagree on the resolved config", "ranks [0]", "ranks [1]")


def test_a_corrupt_image_fails_naming_it_or_is_skipped_and_counted(tmp_path):
    data = synth_imagefolder(tmp_path / "data", 60, num_classes=2, num_val_samples=8, image_size=8, progress=False)
    bad = sorted((data / "train").rglob("*.jpg"))[5]
    bad.write_bytes(bad.read_bytes()[:30])  # truncated, as by an interrupted copy
    args = train_args(data, tmp_path / "run", tmp_path / "store", "shuffle=local", "epochs=2")
    fails_with(run_mpi(RANKS, args, timeout_s=120), "cannot read sample", str(bad.relative_to(data)),
               "loader.on_error=skip")

    skipping = train_args(data, tmp_path / "run2", tmp_path / "store", "shuffle=local", "epochs=2", "loader.on_error=skip")
    result = run_mpi(RANKS, skipping, timeout_s=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [record["samples"]["skipped"] for record in read_jsonl(tmp_path / "run2" / "metrics.jsonl")] == [1, 1]


def test_a_shared_dir_that_is_not_mounted_is_named_before_anything_is_written(tmp_path):
    bare = tmp_path / "mnt"
    bare.mkdir()
    args = train_args("data/synthetic", tmp_path / "run", tmp_path / "store", "shuffle=global",
                      "dataset=synthetic", f"storage.shared_dir={bare}")
    fails_with(run_mpi(RANKS, args, timeout_s=120), f"storage.shared_dir {bare} is not a mounted file system",
               "bash scripts/shared_fs.sh start")
    assert not any(bare.iterdir())  # the synthetic dataset was not written onto the bare mount point
