"""loader.decode=gpu in a real 2-rank PLS run on the CPU device, killed inside an epoch and resumed.

Flips only, at the stored size: the batched path must give the workers' tensors exactly, so the
resumed run (half of each batch decoded by the training process, half by the loader) must train
on the same samples and reach the same losses as an uninterrupted run that decoded on the CPU.
"""

from __future__ import annotations

import pytest

from hpcshuffle.comm.chaos import ENV
from hpcshuffle.files import read_jsonl
from tests.conftest import audit_by_epoch, run_mpi, train_args

pytestmark = pytest.mark.mpi
RANKS = 2
RUN = ("shuffle=partial", "shuffle.q=0.5", "audit=true", "dataset.augment=flip", "dataset.image_size=null")


def test_a_resumed_run_decoding_on_the_device_matches_one_decoding_in_the_workers(trained, small_dataset, tmp_path):
    reference = trained(RANKS, *RUN) / "run"
    args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", *RUN, "loader.decode=gpu",
                      "loader.gpu_fraction=0.5", "checkpoint.every_steps=2")
    killed = run_mpi(RANKS, args, env={ENV: "1:1:iteration-5"})
    assert killed.returncode != 0, "the chaos kill did not happen"
    resumed = run_mpi(RANKS, args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at epoch 1, step 4" in resumed.stdout, resumed.stdout[-2000:]
    assert audit_by_epoch(tmp_path / "run") == audit_by_epoch(reference)
    losses = [record["train_loss"] for record in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert losses == pytest.approx([record["train_loss"] for record in read_jsonl(reference / "metrics.jsonl")],
                                   rel=1e-6, abs=1e-9)
