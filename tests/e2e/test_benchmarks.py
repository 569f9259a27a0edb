"""Benchmarks run in a reduced mode in CI, so they cannot rot; their numbers are not judged here.

The ones that read the GlusterFS mount use the session's `shared_fs` (tests/conftest.py): the
mounted volume, or one started for the session as root; elsewhere they skip, saying so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.e2e


def test_stage_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/stage.py", "--samples", "200", "--size", "32", "--ranks", "2"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"staging/cp ratio: \d+\.\d\d", lines[-1]), lines[-1]
    assert lines[1].split() == ["method", "seconds", "MiB/s"]


def test_node_scope_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/node_scope.py", "--samples", "200", "--epochs", "2", "--batch", "8"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"node/rank samples sent \(partial, q 0\.3\): \d+\.\d\d", lines[-1]), lines[-1]
    rows = [line.split() for line in lines[2:6]]
    assert [row[:2] for row in rows] == [["local", "rank"], ["local", "node"], ["partial", "rank"], ["partial", "node"]]
    assert all(row[2] == "0" for row in rows), "a run lost or duplicated samples"


def test_train_throughput_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/train_throughput.py", "--device", "cpu", "--model", "small_cnn",
         "--batch", "16", "--image-size", "32", "--classes", "10", "--steps", "8", "--warmup-steps", "2",
         "--workers", "0", "--threads", "1", "--precision", "fp32"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"runner/bare ratio: \d+\.\d\d", lines[-1]), lines[-1]
    assert [line.split()[0] for line in lines[1:4]] == ["loop", "bare", "runner"]


def test_cache_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/cache.py", "--samples", "2000", "--epochs", "3"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"reuse-distance/LRU hit ratio: \d+\.\d\d", lines[-1]), lines[-1]


@pytest.mark.parametrize("pfs", ["emulated", pytest.param("gluster", marks=pytest.mark.gluster)])
def test_loader_benchmark_prints_its_ratio_last(pfs, request):
    if pfs == "gluster":
        request.getfixturevalue("shared_fs")
    result = subprocess.run(
        [sys.executable, "benchmarks/loader.py", "--pfs", pfs, "--samples", "128", "--size", "64", "--batches", "3",
         "--rounds", "1"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    header = {"emulated": "emulated parallel file system", "gluster": "GlusterFS mount"}[pfs]
    assert lines[1].startswith(header), lines[1]
    assert "same samples and tensors per sample id, every round: yes" in lines
    assert [line.split()[0] for line in lines[4:7]] == ["method", "DataLoader", "DataLoader"], lines[4:7]
    assert re.fullmatch(r"unordered/DataLoader ratio: \d+\.\d\d", lines[-1]), lines[-1]


@pytest.mark.gluster
def test_shared_io_benchmark_prints_its_ratio_last(shared_fs):
    result = subprocess.run(
        [sys.executable, "benchmarks/shared_io.py", "--samples", "40", "--size", "32", "--passes", "2",
         "--repeats", "1"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    table = lines[lines.index(next(line for line in lines if line.split()[:2] == ["source", "pass"])) + 1:-2]
    assert [(" ".join(row.split()[:-4]), row.split()[-4]) for row in table] == [
        (source, str(epoch)) for source in ("local store", "shared, guarded", "shared, unguarded") for epoch in (1, 2)
    ], table
    assert "fuse.glusterfs" in lines[1], lines[1]
    assert re.fullmatch(r"shared/local read ratio: \d+\.\d\d", lines[-1]), lines[-1]


@pytest.mark.gluster
def test_shards_benchmark_prints_its_ratio_last(shared_fs):
    result = subprocess.run(
        [sys.executable, "benchmarks/shards.py", "--samples", "40", "--size", "32", "--shard-samples", "8",
         "--passes", "2", "--repeats", "1", "--workers", "2", "--q", "0.5", "--batch", "4", "--epochs", "2"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "as 5 tar shards of 8" in lines[0], lines[0]
    assert "fuse.glusterfs" in lines[1], lines[1]
    assert lines[2].split()[:2] == ["source", "pass"], lines[2]
    assert [(" ".join(row.split()[:-4]), row.split()[-4]) for row in lines[3:9]] == [
        (source, str(epoch)) for source in ("files", "shards, pread", "shards, sequential") for epoch in (1, 2)
    ], lines[3:9]
    assert lines[10].split() == ["unit", "q", "buffer", "buffer", "MB", "sent/epoch", "worker", "batch"], lines[10]
    # a rank holds 20 samples, q 0.5 allows 10: one whole shard of 8, so sample-PLS runs at q 8/20
    assert [row.split()[:5] for row in lines[11:15]] == [
        ["samples", "0.4", "full", "-", "10"], ["shards", "of", "8", "0.5", "full"], ["shards", "of", "8", "0.5", "32"],
        ["shards", "of", "8", "0.5", "8"],
    ], lines[11:15]
    assert re.fullmatch(r"shards/files read ratio: \d+\.\d\d", lines[-1]), lines[-1]


def test_scale_benchmark_prints_its_limits_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/scale.py", "--workers", "256", "--shuffle", "local"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"256 ranks: one simulated epoch in \d+ s wall, \d+\.\d\d GiB peak \(limits: 600 s, 4 GiB\)",
                        lines[-1]), lines[-1]


def test_exchange_benchmark_prints_its_ratio_last():
    result = subprocess.run(
        [sys.executable, "benchmarks/exchange.py", "--quick"],
        check=False, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert [row.split()[:3] for row in lines[1:3]] == [["tmpfs", "4", "KB"], ["tmpfs", "100", "KB"]], lines
    assert re.fullmatch(r"exchange/Alltoallv ratio \(100 KB, q 0\.3, tmpfs\): \d+\.\d{3}", lines[-1]), lines[-1]
    assert "p2p/s" in lines[0], lines[0]  # the same messages point to point, measured in the same job
    bound = re.match(r"at most (\d+\.\d{3}) of the Alltoallv \(100 KB, q 0\.3, tmpfs\) on this machine's \d+ cores",
                     lines[-2])
    assert bound and 0 < float(bound.group(1)) <= 1, lines[-2]


def test_gpu_check_dry_run_writes_every_field_of_gpu_json(tmp_path):
    """The script a lent GPU runs, at toy sizes on the CPU: it cannot rot between lendings."""
    result = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--cpu-dry-run"], check=False, cwd=REPO,
        env={**mpi_env(), "OUT": str(tmp_path), "PYTHON": sys.executable}, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    for field in ("gpu", "date", "ceiling_img_s", "cpu_decode_img_s", "gpu_decode_img_s", "feed_ratio", "gpu_fraction"):
        assert report[field] is not None, field
    assert report["complete"] and report["dry_run"] and report["gpu"] == "cpu (dry run)"
    assert set(report["runs"]) == {"LS-cpu", "LS-gpu", "GS-cpu", "GS-gpu"} | ({"LS-split"} if report["gpu_fraction"] < 1 else set())
    assert [row["gpu_fraction"] for row in report["gpu_fraction_sweep"]] == [1.0, 0.5]
    assert report["audit_exact"] and report["loss_falls"]
    assert report["feed_ratio"] == pytest.approx(
        max(report["cpu_decode_img_s"], report["gpu_decode_img_s"]) / report["ceiling_img_s"])
    assert result.stdout.strip().splitlines()[-1].startswith("feed ratio (best decode / ceiling): ")


def test_gpu_check_records_a_failed_run_and_goes_on(tmp_path, monkeypatch):
    """A run that fails on the lent machine is kept with its reason and log, not the end of the check:
    its minutes are too few to lose the other runs to one of them."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_check

    size = {**gpu_check.SIZES["dry"], "run_timeout_s": 120}
    # a share of the batch outside [0, 1]: the run stops at its config, as a broken one would
    run = gpu_check.train("bad", tmp_path, tmp_path / "work", size, "cpu", "local", 0, "gpu", gpu_fraction=2.0)
    assert run["failed"].startswith("exit code "), run
    assert "gpu_fraction" in run["stderr_tail"] and "gpu_fraction" in (tmp_path / "bad.log").read_text()
    assert gpu_check.rate(run) == f"FAILED ({run['failed']})"
