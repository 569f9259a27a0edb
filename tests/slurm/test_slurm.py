"""jobs/ and the Hydra Slurm launcher against a real Slurm: jobs are submitted, run, and checked.

Each test waits for its jobs under a timeout (hpcshuffle.slurm polls the job every second; the
launcher has its own wait), so a stuck queue fails the test instead of hanging the suite.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.slurm import JobEnd
from hpcshuffle.slurm import run as run_job
from tests.conftest import REPO, audit_by_epoch, mpi_env

pytestmark = pytest.mark.slurm
SMALL = ["dataset.synthesize.samples=200", "progress=false"]
JOB_TIMEOUT_S = 300


def sbatch(args: list[str], log, env: dict[str, str] | None = None) -> JobEnd:
    """Submit from the repository, output to `log`, and wait for the job's end."""
    return run_job(args, log=log, cwd=REPO, env={**mpi_env(), **(env or {})}, timeout_s=JOB_TIMEOUT_S)


def test_train_sbatch_with_two_tasks(slurm, tmp_path):
    run_dir = tmp_path / "run"
    log = tmp_path / "job.out"
    job = sbatch(
        ["--ntasks=2", "--ntasks-per-node=2", "--cpus-per-task=1", "jobs/train.sbatch",
         f"dataset.root={tmp_path / 'data'}", "shuffle=partial", "shuffle.q=0.3", "epochs=2", "batch_size=16",
         "audit=true", *SMALL],
        log, env={"RUN_DIR": str(run_dir), "LOCAL_DIR": str(tmp_path / "store")},
    )
    assert job.exit_code == 0, job.log[-3000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [(r["epoch"], r["workers"]) for r in records] == [(0, 2), (1, 2)], "srun did not start one 2-rank MPI job"
    assert all(r["samples"]["sent"] == r["samples"]["received"] > 0 for r in records)
    for epoch, rows in audit_by_epoch(run_dir).items():
        held = sorted(i for row in rows for i in row["held"])
        assert held == list(range(200)), f"epoch {epoch}: a sample is lost or duplicated"


def test_train_sbatch_names_a_run_directory_it_cannot_make(slurm, tmp_path):
    (tmp_path / "a-file").write_text("")  # as root every directory is writable: a file in the path fails
    job = sbatch(["--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=1", "jobs/train.sbatch"], tmp_path / "job.out",
                 env={"RUN_DIR": str(tmp_path / "a-file" / "run")})
    assert job.exit_code == 2 and job.restarts == 0, job.log[-3000:]  # bad input: not requeued
    assert f"cannot create the run directory {tmp_path / 'a-file' / 'run'}: set RUN_DIR" in job.log


def test_hydra_multirun_through_the_slurm_launcher(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    command = [
        sys.executable, "-m", "hpcshuffle.train", "-m", "hydra/launcher=slurm", "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}",
        "shuffle=partial", "shuffle.q=0.1,0.3", "batch_size=16,32", "epochs=1",
        f"dataset.root={tmp_path / 'data'}", *SMALL,
    ]
    try:
        result = subprocess.run(command, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as err:
        subprocess.run(["scancel", "--name", "hpcshuffle"], capture_output=True)
        pytest.fail(f"the Slurm multirun did not finish in 600 s:\n{err.stderr}")
    assert result.returncode == 0, result.stderr[-4000:]
    runs = sorted(path.parent for path in sweep.glob("*/metrics.jsonl"))
    assert len(runs) == 4, runs
    settings = set()
    for run in runs:
        (record,) = read_jsonl(run / "metrics.jsonl")
        assert record["workers"] == 2, f"{run}: the job's tasks were not one MPI job (--mpi=pmi2)"
        settings.add((record["q"], record["batch_size"]))
    assert settings == {(0.1, 16), (0.1, 32), (0.3, 16), (0.3, 32)}

    summary = subprocess.run([sys.executable, "-m", "hpcshuffle.cli", "tune-q", str(sweep)], cwd=REPO,
                             env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    with open(sweep / "summary.csv") as table:
        assert len(list(csv.DictReader(table))) == 4


def test_sweep_over_workers_and_q(slurm, tmp_path):
    experiment = f"slurm-test-{tmp_path.name}"
    out = REPO / "results" / experiment
    log = tmp_path / "sweep.out"
    try:
        job = sbatch(
            ["--ntasks=2", "--ntasks-per-node=2", "--cpus-per-task=1", "jobs/sweep_workers_q.sbatch",
             f"dataset.root={tmp_path / 'data'}", "epochs=1", "batch_size=16", *SMALL],
            log, env={"WORKERS": "1 2", "QS": "0 0.3", "GLOBAL": "0", "EXPERIMENT": experiment},
        )
        assert job.exit_code == 0, job.log[-3000:]
        found = {(r["workers"], r["shuffle"], r["q"]) for path in out.glob("*/metrics.jsonl") for r in read_jsonl(path)}
        assert found == {(1, "local", 0.0), (1, "partial", 0.3), (2, "local", 0.0), (2, "partial", 0.3)}
        with open(out / "summary.csv") as table:
            assert len(list(csv.DictReader(table))) == 4
        assert "smallest q" in job.log
    finally:
        subprocess.run(["rm", "-rf", str(out)])
