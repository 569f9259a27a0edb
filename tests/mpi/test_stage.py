"""`hpcshuffle stage` under a real mpiexec: interrupted and resumed, verified, change-aware, capacity-checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.formats.imagefolder import scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.plan import PlanSpec, initial_partition, plan_epochs
from hpcshuffle.storage.layout import rank_dir
from hpcshuffle.storage.store import Store
from tests.conftest import REPO, SHORT_EPOCHS, mpi_env, run_mpi, train_args

pytestmark = pytest.mark.mpi
RANKS = 2


def stage_args(src: Path, dst: Path, *extra: str) -> list[str]:
    """`python -m hpcshuffle.cli stage ...` for run_mpi (which puts the interpreter first)."""
    return ["-m", "hpcshuffle.cli", "stage", "--src", str(src), "--dst", str(dst), "--shuffle", "partial",
            "--q", "0.2", "--workers", str(RANKS), *extra]


def stage(src: Path, dst: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_mpi(RANKS, stage_args(src, dst, *extra), 120)


def assert_staged_as_planned(src: Path, dst: Path) -> None:
    catalog = scan(src, "train")
    held = initial_partition(PlanSpec(len(catalog), RANKS, 1, 0.2, 0))
    for rank in range(RANKS):
        with Store(rank_dir(dst, rank)) as store:
            assert store.verify(held[rank]).clean
            assert all(store.intact(i) for i in store.ids())
            assert store.epoch == 0
            assert not [p for p in store.samples_dir.iterdir() if ".tmp" in p.name]


def rank_pid(marker: str, rank: int) -> int | None:
    """The pid of MPI rank `rank` of the job whose command line contains `marker`."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if marker not in cmdline or "hpcshuffle" not in cmdline:
            continue
        try:
            if proc.environ().get("PMI_RANK") == str(rank):
                return proc.pid
        except psutil.Error:  # gone meanwhile
            continue
    return None


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> Path:
    """Enough small files that one copy thread takes a while: room to kill a rank mid-copy."""
    return synth_imagefolder(tmp_path_factory.mktemp("many") / "src", 3000, 10, num_val_samples=10,
                             image_size=24, progress=False)


def test_killed_rank_then_rerun_completes_and_verifies(many_files, tmp_path):
    dst = tmp_path / "local"
    args = ["mpiexec", "-n", str(RANKS), sys.executable, *stage_args(many_files, dst, "--threads", "1")]
    job = subprocess.Popen(args, cwd=REPO, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples = rank_dir(dst, 1) / "samples"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (samples.is_dir() and len(os.listdir(samples)) >= 30):
        time.sleep(0.002)
    pid = rank_pid(str(dst), 1)
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGKILL)
    job.wait(timeout=60)
    assert job.returncode != 0
    copied_before = len(os.listdir(samples))
    assert 30 <= copied_before < 1500, f"rank 1 was not killed mid-copy ({copied_before} files)"

    resumed = stage(many_files, dst)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    copied = int(resumed.stdout.split("copied ")[1].split()[0])
    assert 0 < copied < 3000, resumed.stdout  # only what the kill left out
    assert_staged_as_planned(many_files, dst)

    again = stage(many_files, dst)
    assert again.returncode == 0 and "copied 0 samples" in again.stdout, again.stdout


def test_corrupt_copy_and_changed_source_are_found_and_fixed(small_dataset, tmp_path):
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(small_dataset), str(src)], check=True)
    dst = tmp_path / "local"
    assert stage(src, dst).returncode == 0
    with Store(rank_dir(dst, 0)) as store:
        victim = sorted(store.ids())[0]
        path = store.path(victim)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x55
    path.write_bytes(bytes(data))
    changed = scan(src, "train").path(victim + 1 if victim + 1 < 211 else victim - 1)
    changed.write_bytes(changed.read_bytes() + b"\0\0")

    fixed = stage(src, dst)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "1 staged copies failed their checksum and were copied again" in fixed.stdout
    assert "dataset changed since staging: 1 source files differ" in fixed.stdout
    assert changed.relative_to(src).as_posix() in fixed.stdout
    assert_staged_as_planned(src, dst)


def test_too_little_space_is_named_on_every_rank(small_dataset, tmp_path):
    result = stage(small_dataset, tmp_path / "local", "--max-gib", "0.0001")
    assert result.returncode == 2
    assert "node-local space on" in result.stderr and "lower q" in result.stderr
    assert not list((tmp_path / "local").rglob("*.jpg")), "nothing may be copied after a failed check"


def test_training_without_staging_refuses_an_unstaged_store(small_dataset, tmp_path):
    args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", "storage.stage=false", "shuffle=local",
                      "epochs=1")
    result = run_mpi(RANKS, args)
    assert result.returncode != 0
    assert "is not staged for this run" in result.stderr and "hpcshuffle stage" in result.stderr

    assert stage(small_dataset, tmp_path / "store").returncode == 0  # stage in a separate step ...
    result = run_mpi(RANKS, args)  # ... then train from it
    assert result.returncode == 0, result.stderr[-3000:]


def test_global_shuffling_from_a_node_replica_reads_no_shared_storage(small_dataset, tmp_path):
    """storage.replica=true: the node holds each sample once, split over its ranks; GS reads it there."""
    run_dir, store = tmp_path / "run", tmp_path / "store"
    args = train_args(small_dataset, run_dir, store, "shuffle=global", "storage.replica=true", "audit=true",
                      f"epochs={SHORT_EPOCHS}")
    result = run_mpi(RANKS, args)
    assert result.returncode == 0, result.stderr[-3000:]
    held = []
    for rank in range(RANKS):
        with Store(rank_dir(store, rank)) as replica:
            held += sorted(replica.ids())
            assert all(i % RANKS == rank for i in replica.ids())
    assert sorted(held) == list(range(211))
    plans = list(plan_epochs(PlanSpec(211, RANKS, 8, 1.0, 0), "global", SHORT_EPOCHS))
    audit = read_jsonl(run_dir / "audit.jsonl")
    assert sorted((row["epoch"], row["rank"]) for row in audit) == [
        (epoch, rank) for epoch in range(SHORT_EPOCHS) for rank in range(RANKS)
    ]
    for row in audit:
        assert row["trained"] == plans[row["epoch"]].order[row["rank"]].tolist()
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        assert record["samples"]["read_shared"] == 0
        assert record["samples"]["read_local"] == RANKS * 106
