"""Locality-aware loading in real `mpiexec -n K` runs, checked from their audit.

Yang & Cong's Theorem 1 needs the global batch of every step to be global shuffling's; the load
balancing needs equal local batches; the caches must never change and nothing may be lost.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hpcshuffle.comm.chaos import ENV
from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from tests.conftest import SMALL_SAMPLES, audit_by_epoch, run_mpi, train_args

pytestmark = pytest.mark.mpi
EPOCHS = 3
BATCH = 8


@pytest.mark.parametrize("ranks, loader", [(3, ["loader.workers=0"]),
                                           (4, ["loader.workers=2", "loader.io_threads=4", "loader.decode_threads=1"])])
def test_locality_trains_on_global_shufflings_batches_from_local_caches(small_dataset, tmp_path, ranks, loader):
    """Loans cross the DataLoader's worker processes and the unordered fetcher's threads, too."""
    run_dir = tmp_path / "run"
    result = run_mpi(ranks, train_args(small_dataset, run_dir, tmp_path / "store", "shuffle=locality", "audit=true",
                                       *loader))
    assert result.returncode == 0, result.stderr[-3000:]
    assert_global_shufflings_batches(run_dir, ranks)


def test_a_rank_killed_inside_an_epoch_resumes_its_loans_from_the_step_checkpoint(small_dataset, tmp_path):
    """The resumed epoch starts at a later step: only the loans of the steps left are made."""
    args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", "shuffle=locality", "audit=true",
                      "checkpoint.every_steps=2")
    killed = run_mpi(3, args, env={ENV: "1:1:iteration-5"})
    assert killed.returncode != 0
    resumed = run_mpi(3, args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at epoch 1, step 4" in resumed.stdout
    assert_global_shufflings_batches(tmp_path / "run", 3)


def assert_global_shufflings_batches(run_dir, ranks: int) -> None:
    spec = PlanSpec(SMALL_SAMPLES, ranks, BATCH, 0.0, 0)
    global_plans = list(plan_epochs(spec, "global", EPOCHS))
    locality_plans = list(plan_epochs(spec, "locality", EPOCHS))
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(EPOCHS))
    for epoch, rows in audit.items():
        held = [row["held"] for row in rows]
        assert sorted(i for ids in held for i in ids) == list(range(SMALL_SAMPLES)), "a cached sample is lost"
        assert held == [ids.tolist() for ids in locality_plans[0].held], "a cache changed"
        trained = [row["trained"] for row in rows]
        assert {len(ids) for ids in trained} == {spec.max_share}, "local batches differ in size"
        for step in range(spec.iterations):
            start, stop = spec.batch_bounds(step)
            got = Counter(i for ids in trained for i in ids[start:stop])
            want = Counter(np.concatenate([o[start:stop] for o in global_plans[epoch].order]).tolist())
            assert got == want, f"epoch {epoch} step {step}: not global shuffling's global batch"

    for record, plan in zip(read_jsonl(run_dir / "metrics.jsonl"), locality_plans):
        samples = record["samples"]
        lent = len(plan.loans.sample_id)
        assert samples["sent"] == samples["received"] == lent > 0
        assert samples["read_shared"] == 0
        assert samples["read_local"] + samples["received"] == ranks * spec.max_share
