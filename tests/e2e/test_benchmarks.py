"""Benchmarks run in a reduced mode in CI, so they cannot rot; their numbers are not judged here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.e2e


def test_stage_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/stage.py", "--samples", "200", "--size", "32", "--ranks", "2"],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"staging/cp ratio: \d+\.\d\d", lines[-1]), lines[-1]
    assert lines[1].split() == ["method", "seconds", "MiB/s"]


def test_train_throughput_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/train_throughput.py", "--device", "cpu", "--model", "small_cnn",
         "--batch", "16", "--image-size", "32", "--classes", "10", "--steps", "8", "--warmup-steps", "2",
         "--workers", "0", "--threads", "1", "--precision", "fp32"],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"runner/bare ratio: \d+\.\d\d", lines[-1]), lines[-1]
    assert [line.split()[0] for line in lines[1:4]] == ["loop", "bare", "runner"]


def test_cache_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/cache.py", "--samples", "2000", "--epochs", "3"],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"reuse-distance/LRU hit ratio: \d+\.\d\d", lines[-1]), lines[-1]


def test_loader_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/loader.py", "--samples", "128", "--size", "64", "--batches", "3", "--rounds", "1"],
        cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "emulated parallel file system" in result.stdout
    assert "same samples and tensors per sample id, every round: yes" in lines
    assert re.fullmatch(r"unordered/DataLoader ratio: \d+\.\d\d", lines[-1]), lines[-1]
