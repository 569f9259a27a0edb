"""Shared fixtures: a small synthetic dataset, a runner for real `mpiexec` jobs, and finished runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hpcshuffle.formats.synthetic import synth_imagefolder

REPO = Path(__file__).resolve().parents[1]
# 211 is prime: no worker count divides it, so partitions always differ in size
SMALL_SAMPLES = 211
# what `train_args` trains unless overridden
EPOCHS = 3
BATCH = 8
# for runs whose every epoch checks the same facts: one epoch boundary is crossed
SHORT_EPOCHS = 2


def mpi_env() -> dict[str, str]:
    env = dict(os.environ)
    # mpiexec comes with the `mpich` wheel, next to this interpreter
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_mpi(
    ranks: int, args: list[str], timeout_s: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `mpiexec -n ranks python <args>`; a hang fails the test instead of blocking the suite."""
    command = ["mpiexec", "-n", str(ranks), sys.executable, *args]
    try:
        return subprocess.run(
            command, cwd=REPO, env={**mpi_env(), **(env or {})}, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{' '.join(command)} hung for {timeout_s} s:\n{err.stdout}\n{err.stderr}")


def train_args(dataset: Path, run_dir: Path, store: Path, *overrides: str) -> list[str]:
    return [
        "-m", "hpcshuffle.train",
        "dataset=imagefolder", f"dataset.root={dataset}",
        f"hydra.run.dir={run_dir}", f"storage.local_dir={store}",
        f"batch_size={BATCH}", f"epochs={EPOCHS}", "progress=false",
        *overrides,
    ]


def audit_by_epoch(run_dir: Path) -> dict[int, list[dict]]:
    """audit.jsonl as {epoch: rows sorted by rank}."""
    from hpcshuffle.metrics import read_jsonl

    by_epoch: dict[int, list[dict]] = {}
    for row in read_jsonl(run_dir / "audit.jsonl"):
        by_epoch.setdefault(row["epoch"], []).append(row)
    return {epoch: sorted(rows, key=lambda r: r["rank"]) for epoch, rows in by_epoch.items()}


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "small"
    return synth_imagefolder(root, SMALL_SAMPLES, num_classes=4, num_val_samples=40, image_size=16, progress=False)


@pytest.fixture(scope="session")
def trained(small_dataset, tmp_path_factory) -> Callable[..., Path]:
    """`trained(ranks, *overrides)`: a finished `mpiexec -n ranks` training run on the small dataset.

    Returns the directory holding the run's `run/` and `store/`. Each distinct (ranks, overrides)
    trains once per session and every test that asks for it shares it, so tests only read it:
    several facts of one run cost one run, not one each.
    """
    runs: dict[tuple, Path] = {}

    def run(ranks: int, *overrides: str) -> Path:
        key = (ranks, *overrides)
        if key not in runs:
            root = tmp_path_factory.mktemp("trained")
            result = run_mpi(ranks, train_args(small_dataset, root / "run", root / "store", *overrides))
            assert result.returncode == 0, result.stderr[-3000:]
            runs[key] = root
        return runs[key]

    return run
