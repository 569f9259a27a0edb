"""A platform from measured runs (`scale calibrate`) and the simulation checked against them (`scale validate`).

Calibration reads `config.yaml` and `metrics.jsonl` of real runs of one workload (same dataset,
model, batch) on one machine and fits what the engine charges (scale/engine.py):

- FW+BW, the loader's and the shared-storage client's CPU per file: per-sample medians of the
  phases over the runs where every rank had a core of its own (ranks ≤ cores), so no contention
  is folded into them; the engine adds the contention back when more ranks than cores share the
  node. The exchange: a line through those runs' exchange phase against the samples each sent,
  whose slope is the CPU per sample and whose intercept the fixed cost of an epoch's commit.
- The allreduce's α: a least-squares fit of the measured time per iteration to the ring's
  2(M−1)·α over the same runs (the gradients of a CPU-sized model are small, so the latency term
  is the allreduce; on the CPU it is core time, contended like the rest); its bandwidth and the
  ranks' MPI link from a ping-pong between two ranks.
- Shared storage, when its per-file read times were measured (experiments/storage_latency.py,
  `--storage`): one server per brick, whose service time is the inverse of the largest throughput
  any number of readers reached, and a fixed latency, what one reader's mean file time leaves
  beside one service. GS's client CPU is then what its reads cost beyond those; without the
  measurement all of it is client CPU, which no number of files in flight can overlap.
- Everything else (one node, its cores, the dataset's size and sample bytes) is read off the
  runs and the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from hpcshuffle.analysis.report import steady_means
from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import get_strategy
from hpcshuffle.scale.platform import PlatformError

PHASE_KEYS = ("epoch", "io", "exchange", "fwbw", "allreduce")


@dataclass(frozen=True)
class MeasuredRun:
    """One real run, reduced to what calibration and validation need (seconds per epoch)."""

    path: Path
    shuffle: str
    q: float
    workers: int
    batch_size: int
    samples: int
    iterations: int
    seed: int
    model: str
    dataset_root: str
    phases: dict[str, float]  # steady-state means: epoch (slowest rank) and each phase (mean over ranks)
    sent_per_rank: float
    loader_workers: int = 0  # DataLoader processes (0: the rank loads its batches itself, in the loop)
    io_threads: int = 1  # files each of them reads at once

    @property
    def samples_per_rank(self) -> float:
        """N/M, the samples a rank trains on per epoch."""
        return self.samples / self.workers


def read_run(run_dir: str | Path) -> MeasuredRun:
    """The measured run in `run_dir`: its config.yaml and the steady-state means of its metrics.jsonl
    (epochs after the first). PlatformError for a directory that is not a run, holds no epoch, or
    ran in node scope."""
    path = Path(run_dir)
    config_path, metrics_path = path / "config.yaml", path / "metrics.jsonl"
    for needed in (config_path, metrics_path):
        if not needed.is_file():
            raise PlatformError(f"{path} is not a run directory: {needed.name} is missing "
                                "(pass the directories `hpcshuffle train` wrote, e.g. results/reference/epoch_time/M4/*)")
    config = yaml.safe_load(config_path.read_text())
    records = read_jsonl(metrics_path, partial_last=True)
    if not records:
        raise PlatformError(f"{metrics_path} holds no epochs; calibrate from runs that finished at least one")
    means = steady_means(records, skip_first=True)
    last = records[-1]
    if last.get("scope") == "node":
        raise PlatformError(f"{path} ran with storage.scope=node ({last.get('ranks_per_node')} ranks per node): "
                            "calibration and validation replay rank-scope runs; pass runs made with "
                            "storage.scope=rank (as experiments/epoch_time.sh makes them)")
    return MeasuredRun(
        path=path, shuffle=last["shuffle"], q=float(last["q"]), workers=int(last["workers"]),
        batch_size=int(last["batch_size"]), samples=int(last["num_samples"]), iterations=int(last["iterations"]),
        seed=int(config.get("seed", 0)), model=str(config["model"]["name"]),
        dataset_root=str(config["dataset"]["root"]),
        phases={phase: float(means[phase]) for phase in PHASE_KEYS}, sent_per_rank=means["sent"] / int(last["workers"]),
        loader_workers=int(config.get("loader", {}).get("workers", 0)),
        io_threads=int(config.get("loader", {}).get("io_threads", 1)),
    )


def read_runs(run_dirs: list[str]) -> list[MeasuredRun]:
    """The runs, refused unless they measured one workload (dataset, model, batch size, N)."""
    if not run_dirs:
        raise PlatformError("give at least one run directory")
    runs = [read_run(run_dir) for run_dir in run_dirs]
    first = runs[0]
    for run in runs[1:]:
        for what in ("dataset_root", "model", "batch_size", "samples"):
            if getattr(run, what) != getattr(first, what):
                raise PlatformError(
                    f"calibration runs measured different workloads: {first.path} has {what} "
                    f"{getattr(first, what)!r}, {run.path} has {getattr(run, what)!r}; calibrate from runs "
                    "of one dataset, model and batch size (one platform entry describes one workload)"
                )
    return runs


def workload_names(run: MeasuredRun) -> tuple[str, str]:
    """(model key, dataset key) a calibrated platform files the runs' workload under."""
    return run.model, Path(run.dataset_root).name


def measured_storage(path: Path, target: str) -> dict:
    """The `shared:` knobs of one target of experiments/storage_latency.py's json (see the module doc)."""
    try:
        rows = [row for row in json.loads(Path(path).read_text())["rows"] if row["target"] == target]
    except (OSError, ValueError, KeyError) as err:
        raise PlatformError(f"{path} is not experiments/storage_latency.py's latency.json ({err})") from None
    alone = [row["mean_s"] for row in rows if row["nodes"] == 1 and row["readers"] == 1]
    if not alone:
        known = sorted({row["target"] for row in json.loads(Path(path).read_text())["rows"]})
        raise PlatformError(f"{path} has no one-reader rows of target {target!r}; its targets are {known}")
    service = 1.0 / max(row["files_per_s"] for row in rows)
    busiest = max(rows, key=lambda row: row["nodes"] * row["readers"])
    return {"servers": 1, "service": {"dist": "lognormal", "mean": service, "cv": round(busiest["lognormal"]["cv"], 3)},
            "file_latency": max(0.0, statistics.fmean(alone) - service)}


def fit_platform(runs: list[MeasuredRun], name: str, cores: int, sample_bytes: float,
                 link: tuple[float, float], gradient_bytes: float, ranks_per_node: int | None = None,
                 storage: dict | None = None) -> dict:
    """The platform yaml (as a dict) that the engine needs to replay `runs` on this machine.

    Args:
        cores: the machine's CPU cores. sample_bytes: mean bytes of one sample file.
        link: (latency s, bandwidth bytes/s) between two ranks, from `ping_pong`.
        gradient_bytes: bytes allreduced per iteration (the model's parameters × 4).
        ranks_per_node: the most ranks the simulated node holds (default: the runs' largest M), so
            that runs with more ranks than the calibration's can be predicted.
        storage: measured `shared:` knobs (`measured_storage`); GS's client CPU is fitted beyond them.
    """
    uncontended = [run for run in runs if run.workers <= cores] or runs
    scale = {id(run): cores / run.workers if run.workers > cores else 1.0 for run in uncontended}

    def per_sample(phase: str, chosen: list[MeasuredRun], per: str = "samples_per_rank") -> float:
        values = [run.phases[phase] / getattr(run, per) * scale[id(run)] for run in chosen if getattr(run, per) > 0]
        return statistics.median(values) if values else 0.0

    stored = [run for run in uncontended if get_strategy(run.shuffle).trains_from_shared is False]
    from_shared = [run for run in uncontended if get_strategy(run.shuffle).trains_from_shared]
    exchanging = [run for run in uncontended if run.sent_per_rank > 0]
    loader_cpu = per_sample("io", stored or uncontended)
    storage = storage or {"servers": 1, "service": {"dist": "fixed", "mean": 0.0}, "file_latency": 0.0}
    waited = storage["file_latency"] + storage["service"]["mean"]  # a file's read, alone, one in flight
    client_cpu = max(0.0, per_sample("io", from_shared) - loader_cpu - waited) if from_shared else 0.0
    steps = [2 * (run.workers - 1) for run in uncontended]
    per_iteration = [run.phases["allreduce"] / run.iterations * scale[id(run)] for run in uncontended]
    alpha = sum(s * t for s, t in zip(steps, per_iteration)) / sum(s * s for s in steps) if any(steps) else 0.0
    latency, bandwidth = link
    model, dataset = workload_names(runs[0])
    fast = 1.0e12  # a resource the runs show never limits: folded into the per-file CPU costs
    return {
        "name": name,
        "description": f"calibrated from {len(runs)} runs on a {cores}-core machine ({model} on {dataset})",
        "nodes": 1, "ranks_per_node": max(ranks_per_node or 0, *(run.workers for run in runs)),
        "cpu_cores_per_node": cores,
        "accelerators_per_node": 0,
        "network": {"topology": "star", "link_bandwidth": bandwidth, "link_latency": latency,
                    "intra_node_bandwidth": bandwidth, "intra_node_latency": latency},
        "local": {"read_bandwidth": fast, "write_bandwidth": fast, "file_latency": 0.0},
        "shared": {"read_bandwidth": fast, "metadata_rate": fast, **storage, "client_cpu_per_file": client_cpu},
        "loader": {"workers": 1, "prefetch": 0, "cpu_per_file": loader_cpu},
        "allreduce": {"alpha": alpha, "bandwidth": bandwidth},
        "exchange": dict(zip(("cpu_per_sample", "epoch_overhead"), exchange_cost(exchanging, scale))),
        "models": {model: {"fwbw_per_sample": per_sample("fwbw", uncontended), "gradient_bytes": gradient_bytes}},
        "datasets": {dataset: {"samples": runs[0].samples, "sample_bytes": sample_bytes}},
        "calibration": {"runs": [str(run.path) for run in runs],
                        "uncontended_runs": [str(run.path) for run in uncontended]},
    }


def exchange_cost(runs: list[MeasuredRun], scale: dict[int, float]) -> tuple[float, float]:
    """(s per exchanged sample, s per epoch): a least-squares line through each run's exchange phase
    against the samples it sent; with one q only, all of it per sample."""
    sent = [run.sent_per_rank for run in runs]
    seconds = [run.phases["exchange"] * scale[id(run)] for run in runs]
    if len(set(sent)) < 2:
        return (statistics.median(t / x for t, x in zip(seconds, sent)) if runs else 0.0), 0.0
    slope, intercept = statistics.linear_regression(sent, seconds)
    if intercept < 0 or slope < 0:  # noise: no fixed cost to see
        return statistics.median(t / x for t, x in zip(seconds, sent)), 0.0
    return slope, intercept


def mean_file_bytes(root: Path, limit: int = 2000) -> float:
    """Mean size of (up to `limit`) files under a dataset root."""
    sizes = []
    for directory, _, names in os.walk(root):
        sizes += [os.path.getsize(os.path.join(directory, name)) for name in names]
        if len(sizes) >= limit:
            break
    if not sizes:
        raise PlatformError(f"no files under {root} to measure the sample size from; pass --sample-bytes")
    return sum(sizes) / len(sizes)


def gradient_bytes_of(model: str, classes: int = 10) -> float:
    """Bytes allreduced per iteration: the model's parameters as fp32."""
    from hpcshuffle.models import build  # torch: only here

    return 4.0 * sum(p.numel() for p in build(model, num_classes=classes).parameters())


def ping_pong(size: int = 1 << 20, repeats: int = 50) -> tuple[float, float]:
    """(one-way latency s, bandwidth bytes/s) between two `mpiexec` ranks on this machine."""
    # the mpich wheel puts mpiexec beside the interpreter; a cluster's own one is on PATH
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    command = [mpiexec, "-n", "2", sys.executable, "-m", "hpcshuffle.scale.pingpong", str(size), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise PlatformError(f"the MPI ping-pong failed ({' '.join(command)}): {done.stderr.strip()[-500:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return measured["latency_s"], measured["bandwidth_Bps"]
