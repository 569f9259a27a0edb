"""Virtual workers against a real `mpiexec -n 4` run of the same seed and plan (through the
equivalence benchmark, which trains both and a chunked virtual run, and compares them)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO, mpi_env


def test_four_virtual_workers_train_as_four_ranks_do(tmp_path):
    # locality-aware loading: the real ranks lend each other samples, the virtual run reads them
    result = subprocess.run(
        [sys.executable, "benchmarks/simulator_equivalence.py", "--workers", "4", "--shuffle", "locality",
         "--samples", "256", "--batch", "8", "--epochs", "2", "--out", str(tmp_path)],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "same samples per worker, step and epoch: yes" in lines
    sent = re.search(r"samples sent per epoch: mpi (\[.*?\]), virtual (\[.*?\]), virtual chunk=1 (\[.*?\])",
                     result.stdout)
    assert sent and len(set(sent.groups())) == 1 and sent.group(1) != "[0, 0]", result.stdout  # lent, as counted
    assert len([line for line in lines if re.match(r"\s+\d+\s", line)]) == 16  # 2 epochs of 8 steps
    scores = re.search(r"mpi ([\d.]+) %, virtual ([\d.]+) %, virtual chunk=1 ([\d.]+) %", result.stdout)
    assert scores and len(set(scores.groups())) == 1, result.stdout
    worst = re.fullmatch(r"max \|loss_sim - loss_mpi\|: (\S+)", lines[-1])
    assert worst and float(worst.group(1)) <= 1e-4, lines[-1]


def test_global_batch_norm_trains_alike_on_four_ranks_and_four_virtual_workers(tmp_path):
    """model.norm=global: the ranks all-reduce BatchNorm's statistics, the virtual run takes them over its
    global batch in one pass; the losses agree step by step."""
    result = subprocess.run(
        [sys.executable, "benchmarks/simulator_equivalence.py", "--workers", "4", "--shuffle", "partial",
         "--samples", "256", "--batch", "8", "--epochs", "1", "--norm", "global", "--out", str(tmp_path)],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "same samples per worker, step and epoch: yes" in lines
    worst = re.fullmatch(r"max \|loss_sim - loss_mpi\|: (\S+)", lines[-1])
    assert worst and float(worst.group(1)) <= 1e-4, lines[-1]
