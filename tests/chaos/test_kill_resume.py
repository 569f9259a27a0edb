"""A rank SIGKILLed anywhere in an epoch, then the job restarted: nothing lost, training continues.

Each case kills one rank of a 4-rank PLS run during epoch 1 (HPCSHUFFLE_CHAOS_KILL, see
hpcshuffle/comm/chaos.py), after one exchange has changed the partition, checks that every sample is
still in some store, restarts the same command, and compares the audit and the loss curve with
an uninterrupted run's (the shared `trained` run that tests/mpi/test_train_audit.py also checks).
One case does the same with the ranks pretending to be 2 nodes × 2 ranks (storage.scope=node),
one with the same images in tar shards, moved whole (shuffle.unit=shard).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from hpcshuffle.comm.chaos import ENV
from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.store import Store
from hpcshuffle.storage.worker_start import NOT_A_RANK
from hpcshuffle.training.checkpoint import PREEMPT_EXIT_CODE
from tests.conftest import (
    BATCH,
    EPOCHS,
    REPO,
    SMALL_SAMPLES,
    SMALL_SHARD,
    audit_by_epoch,
    budget,
    dead_pack_bytes,
    mpi_env,
    run_mpi,
    train_args,
)

pytestmark = pytest.mark.chaos
RANKS, KILL_EPOCH, Q = 4, 1, 0.5
PLS = ("shuffle=partial", f"shuffle.q={Q}", "audit=true")
SPEC = PlanSpec(SMALL_SAMPLES, RANKS, BATCH, Q, 0)
PLANS = list(plan_epochs(SPEC, "partial", EPOCHS))
NODES = ("storage.scope=node", "storage.ranks_per_node=2")
NODE_PLANS = list(plan_epochs(PlanSpec(SMALL_SAMPLES, RANKS, BATCH, Q, 0, ranks_per_node=2), "partial", EPOCHS))
# random but fixed, so that a failure names a kill point that reproduces it; two points inside
# the exchange's iterations take the same recovery path as more would
_draw = random.Random(2026)
KILLS = [
    (rank, f"iteration-{i}") for rank, i in _draw.sample([(r, i) for r in range(RANKS) for i in range(SPEC.iterations)], 2)
] + [
    (_draw.randrange(RANKS), point) for point in ("before_barrier", "mid_clean", "before_checkpoint")
]
NODE_KILLS = [(_draw.randrange(RANKS), f"iteration-{_draw.randrange(SPEC.iterations)}")]
SHARDS = ("shuffle.unit=shard",)
SHARD_PLANS = list(plan_epochs(PlanSpec(SMALL_SAMPLES, RANKS, BATCH, Q, 0, shard_samples=SMALL_SHARD), "partial",
                               EPOCHS))
SHARD_KILLS = [(_draw.randrange(RANKS), f"iteration-{_draw.randrange(SPEC.iterations)}")]


def pls_args(dataset, tmp_path, *extra: str) -> list[str]:
    return train_args(dataset, tmp_path / "run", tmp_path / "store", *PLS, *extra)


def uninterrupted(trained, *extra: str) -> dict:
    """The uninterrupted run: its audit and its losses."""
    run_dir = trained(RANKS, *PLS, *extra) / "run"
    return {"audit": audit_by_epoch(run_dir), "metrics": read_jsonl(run_dir / "metrics.jsonl")}


@pytest.fixture(scope="module")
def reference(trained) -> dict:
    return uninterrupted(trained)


def held_in_stores(store_root) -> list[set[int]]:
    """Per rank, every sample its store can give a restart: committed, or received after the last commit."""
    held = []
    for rank_dir in sorted(store_root.iterdir()):
        with Store(rank_dir) as store:
            held.append(store.ids() | set(store.orphans))
    return held


def assert_continues_like_reference(run_dir, reference: dict) -> None:
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(EPOCHS))
    for epoch, rows in audit.items():
        assert [row["rank"] for row in rows] == list(range(RANKS)), f"epoch {epoch}: a rank's record is missing or doubled"
        held = sorted(i for row in rows for i in row["held"])
        assert held == list(range(SMALL_SAMPLES)), f"epoch {epoch}: a sample is lost or duplicated"
        assert rows == reference["audit"][epoch], f"epoch {epoch} held or trained differently from the uninterrupted run"
    losses = [record["train_loss"] for record in read_jsonl(run_dir / "metrics.jsonl")]
    assert losses == pytest.approx([record["train_loss"] for record in reference["metrics"]], rel=1e-6, abs=1e-9)


def assert_stores_hold_the_final_partition(store_root, plans=PLANS) -> None:
    final = plans[-1].next_held()
    for rank, rank_dir in enumerate(sorted(store_root.iterdir())):
        manifest = json.loads((rank_dir / "manifest.json").read_text())
        assert manifest["epoch"] == EPOCHS
        assert sorted(int(i) for i in manifest["samples"]) == final[rank].tolist()
    for rank_dir in sorted(store_root.iterdir()):  # before opening them: an open frees what a crash left
        assert dead_pack_bytes(rank_dir) == 0, f"{rank_dir}: packs keep bytes of samples that left"
    assert held_in_stores(store_root) == [set(ids.tolist()) for ids in final], "samples outside the manifests"


@pytest.mark.parametrize(("rank", "point"), KILLS, ids=[f"rank{r}-{p}" for r, p in KILLS])
def test_sigkill_inside_an_epoch_then_restart(small_dataset, tmp_path, reference, rank, point):
    kill_and_restart(pls_args(small_dataset, tmp_path), tmp_path, reference, PLANS, rank, point)


@pytest.mark.parametrize(("rank", "point"), NODE_KILLS, ids=[f"rank{r}-{p}" for r, p in NODE_KILLS])
def test_sigkill_inside_a_node_scope_epoch_then_restart(small_dataset, tmp_path, trained, rank, point):
    """Ranks read their node's other stores and only nodes exchange: the same guarantees hold."""
    args = pls_args(small_dataset, tmp_path, *NODES)
    kill_and_restart(args, tmp_path, uninterrupted(trained, *NODES), NODE_PLANS, rank, point)


@pytest.mark.parametrize(("rank", "point"), SHARD_KILLS, ids=[f"rank{r}-{p}" for r, p in SHARD_KILLS])
def test_sigkill_inside_a_shard_exchange_then_restart(small_shards, tmp_path, rank, point):
    """Whole shards move: a shard's samples are rows of one slot to one rank, with the same recovery."""
    reference_dir = tmp_path / "reference"
    done = run_mpi(RANKS, train_args(small_shards, reference_dir / "run", reference_dir / "store", *PLS, *SHARDS,
                                     layout="webdataset"))
    assert done.returncode == 0, done.stderr[-3000:]
    reference = {"audit": audit_by_epoch(reference_dir / "run"),
                 "metrics": read_jsonl(reference_dir / "run" / "metrics.jsonl")}
    args = train_args(small_shards, tmp_path / "run", tmp_path / "store", *PLS, *SHARDS, layout="webdataset")
    kill_and_restart(args, tmp_path, reference, SHARD_PLANS, rank, point)


def kill_and_restart(args: list[str], tmp_path, reference: dict, plans, rank: int, point: str) -> None:
    killed = run_mpi(RANKS, args, env={ENV: f"{rank}:{KILL_EPOCH}:{point}"})
    assert killed.returncode != 0, "the chaos kill did not happen"
    assert "Killed" in killed.stdout + killed.stderr or killed.returncode in (9, 137, -9)

    held = held_in_stores(tmp_path / "store")
    missing = set(range(SMALL_SAMPLES)).difference(*held)
    assert not missing, f"samples in no store after the kill: {sorted(missing)[:10]}"

    # storage.stage=false: the restart may not read shared storage, so the stores alone must
    # still hold every sample (the crashed rank's uncommitted files included)
    resumed = run_mpi(RANKS, [*args, "storage.stage=false"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # every kill point but mid_clean precedes the checkpoint written at the kill epoch's end; the
    # sent files are deleted on the writer thread while the training thread goes on to write it
    epochs = (KILL_EPOCH, KILL_EPOCH + 1) if point == "mid_clean" else (KILL_EPOCH,)
    assert any(f"resume: {tmp_path / 'run' / 'checkpoint.pt'} at epoch {epoch}, step 0" in resumed.stdout
               for epoch in epochs), resumed.stdout[-2000:]
    assert_continues_like_reference(tmp_path / "run", reference)
    assert_stores_hold_the_final_partition(tmp_path / "store", plans)


def test_sigkill_after_a_step_checkpoint_resumes_inside_the_epoch(small_dataset, tmp_path, reference):
    args = pls_args(small_dataset, tmp_path, "checkpoint.every_steps=2")
    killed = run_mpi(RANKS, args, env={ENV: f"1:{KILL_EPOCH}:iteration-5"})
    assert killed.returncode != 0
    resumed = run_mpi(RANKS, args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at epoch {KILL_EPOCH}, step 4" in resumed.stdout
    assert_continues_like_reference(tmp_path / "run", reference)
    assert_stores_hold_the_final_partition(tmp_path / "store")


def job_tree(launcher: subprocess.Popen) -> list[psutil.Process]:
    """Every process under the mpiexec launcher (its proxy, the ranks, their forkservers, resource
    trackers and loader workers)."""
    return psutil.Process(launcher.pid).children(recursive=True)


def rank_process(launcher: subprocess.Popen, rank: int) -> psutil.Process | None:
    """Rank `rank` of the job, known by the PMI_RANK that mpiexec gives it: a forkserver, resource
    tracker or loader worker inherits that rank's PMI_RANK too, but also NOT_A_RANK, which leaves
    them out."""
    for process in job_tree(launcher):
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            environ = process.environ()
            if environ.get("PMI_RANK") == str(rank) and NOT_A_RANK not in environ:
                return process
    return None


def loader_workers(rank: psutil.Process) -> list[psutil.Process]:
    """The rank's loader workers: children of its forkserver, so not children of the rank itself."""
    return [process for process in rank.children(recursive=True) if process.ppid() != rank.pid]


def describe_tree(launcher: subprocess.Popen) -> str:
    """The job's processes, one a line (pid, parent, PMI_RANK, NOT_A_RANK, command), for a failure."""
    lines = []
    for process in job_tree(launcher):
        with contextlib.suppress(psutil.Error):
            environ = process.environ()
            lines.append(f"{process.pid} <- {process.ppid()} rank={environ.get('PMI_RANK')} "
                         f"not_a_rank={NOT_A_RANK in environ}: {' '.join(process.cmdline())[:120]}")
    return "\n".join(lines)


def test_preemption_signal_on_one_rank_checkpoints_and_exits_for_requeue(small_dataset, tmp_path, reference):
    """Slurm's --signal=USR1@180 reaches one rank and its loader worker (Slurm signals every
    process of the step); all ranks stop at one step; a restart matches the uninterrupted run,
    which used no worker processes (augmentation does not depend on them)."""
    args = pls_args(small_dataset, tmp_path, "loader.workers=1")
    launcher = subprocess.Popen(
        ["mpiexec", "-n", str(RANKS), sys.executable, *args],
        cwd=REPO, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for line in launcher.stdout:  # wait until training runs: the breakdown's header
            if line.startswith("epoch "):
                break
        # the persistent loader worker starts with the first epoch's first batch, seconds later on
        # a slow machine: wait for that process itself, as long as this machine's slowdown says
        deadline = time.monotonic() + budget(60)
        while not ((rank := rank_process(launcher, 2)) and loader_workers(rank)):
            assert launcher.poll() is None, f"the run ended first: {launcher.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"no loader worker under rank 2 in {budget(60):.0f} s:\n" \
                                                f"{describe_tree(launcher)}"
            time.sleep(0.1)
        # the rank, and everything under it: its forkserver, resource tracker and loader worker
        for process in [rank, *rank.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGUSR1)
        out, err = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    assert launcher.returncode == PREEMPT_EXIT_CODE, err[-3000:]
    assert "stopped at epoch" in err and "(SIGUSR1 on rank 2)" in err and "run the same command again" in err

    resumed = run_mpi(RANKS, args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume:" in resumed.stdout
    assert_continues_like_reference(tmp_path / "run", reference)


def test_resume_on_fewer_ranks_replans_and_restages_the_difference(small_dataset, tmp_path):
    first = run_mpi(RANKS, pls_args(small_dataset, tmp_path, f"epochs={KILL_EPOCH}"))
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_mpi(3, pls_args(small_dataset, tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: 3 ranks instead of 4 ranks: re-planned for 3 workers" in resumed.stdout
    # rank 3's store is not opened by a 3-rank job: its samples come from shared storage
    assert "took " in resumed.stdout and "from other ranks' stores" in resumed.stdout

    plans = list(plan_epochs(PlanSpec(SMALL_SAMPLES, 3, BATCH, Q, 0), "partial", EPOCHS))
    audit = audit_by_epoch(tmp_path / "run")
    assert sorted(audit) == list(range(EPOCHS))
    assert [len(audit[epoch]) for epoch in range(EPOCHS)] == [4] * KILL_EPOCH + [3] * (EPOCHS - KILL_EPOCH)
    for epoch in range(KILL_EPOCH, EPOCHS):
        for row, planned in zip(audit[epoch], plans[epoch].held):
            assert row["held"] == planned.tolist()
        assert sorted(i for row in audit[epoch] for i in row["held"]) == list(range(SMALL_SAMPLES))
    assert np.all(np.diff([r["epoch"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]) == 1)
