"""The cluster scaling experiment's pieces (experiments/cluster_scaling.py, and storage_latency.py's
runs on the same workload): one dataset of ~107 KB JPEGs on /pfs, the cluster's rates probed under
srun, one training job per (nodes, strategy) with its audit, and each run as a row of `hpcshuffle
scale --json` beside what `hpcshuffle scale` predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.analysis.audit import audit_problems
from hpcshuffle.analysis.report import steady_means
from hpcshuffle.formats.synthetic import GENERATOR_VERSION
from hpcshuffle.studies.cluster import PFS, Cluster, fault_named
from hpcshuffle.studies.runs import (
    BIN,
    REPO,
    completed,
    records,
    strategy_overrides,
    train_arguments,
)
from hpcshuffle.studies.sbatch_job import SlurmJob, submit_and_wait

STRATEGIES = ["global", "local", "partial-0.1", "partial-0.3"]
JPEG_SIDE = 352  # ~107 KB synthetic JPEGs, ImageNet's ~110 KB mean (benchmarks/shared_io.py)
IMAGE_SIZE = 32  # what the model sees: decoding stays, FW+BW stays small
CLASSES = 10
BATCH = 32
MODEL = "small_cnn"
BIG_FILE_BYTES = 32 << 20  # the shared-storage streaming probe
RETRIES = 2  # a run a fault of the cluster ended is run again at most this often
PHASE_KEYS = ("epoch", "io", "exchange", "fwbw", "allreduce")


def ensure_dataset(cluster: Cluster, samples: int) -> Path:
    """The dataset's root relative to /pfs, synthesized there on the login node unless it exists;
    written under a temporary name and renamed, so a present root is a complete one."""
    relative = Path("cluster_scaling") / f"imagefolder-{samples}x{JPEG_SIDE}px-{CLASSES}c-seed0-v{GENERATOR_VERSION}"
    root = PFS / relative
    if cluster.run("test", "-d", str(root), check=False).returncode == 0:
        print(f"dataset: {root} (exists)", flush=True)
        return relative
    started = time.perf_counter()
    partial = f"{root}.partial"
    synth = (f"{BIN / 'hpcshuffle'} synth imagefolder --out {partial} --samples {samples} "
             f"--val-samples {max(CLASSES, samples // 30)} --classes {CLASSES} --size {JPEG_SIDE} --seed 0")
    print(f"dataset: {synth} (on the login node) ...", flush=True)
    cluster.run("bash", "-c", f"set -e; rm -rf {partial}; {synth}; mv {partial} {root}", show=True)
    print(f"dataset: {root} written in {time.perf_counter() - started:.0f} s", flush=True)
    return relative


def big_file(cluster: Cluster) -> Path:
    """A file of BIG_FILE_BYTES on /pfs for the streaming probe, written once."""
    path = PFS / "cluster_scaling" / f"probe-{BIG_FILE_BYTES >> 20}MiB.bin"
    cluster.run("bash", "-c", f"test -f {path} || {{ head -c {BIG_FILE_BYTES} /dev/urandom > {path}.partial "
                              f"&& mv {path}.partial {path}; }}")
    return path


def last_json(done: subprocess.CompletedProcess) -> dict:
    """The JSON object a command printed on its last line (a probe's result)."""
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_rates(cluster: Cluster, dataset: Path, files: int, repeats: int, readers: tuple[int, ...] = ()) -> dict:
    """experiments/cluster_probe.py node on one node (one task, one CPU): its storage and compute rates,
    and with `readers` the storage's rate with each count of readers at once."""
    return last_json(cluster.step(
        "srun", *cluster.placement(), "--nodes=1", "--ntasks=1", "--cpus-per-task=1", str(BIN / "python"),
        "experiments/cluster_probe.py", "node", f"--root={PFS / dataset}", f"--big={big_file(cluster)}",
        f"--store=/tmp/cluster-probe-{os.getpid()}", f"--files={files}", f"--repeats={repeats}",
        f"--image-size={IMAGE_SIZE}", f"--batch={BATCH}", f"--model={MODEL}",
        *(["--readers", *map(str, readers)] if readers else [])))


def contention_rates(cluster: Cluster, ranks: int, iterations: int) -> dict:
    """experiments/cluster_probe.py contention on one node: `ranks` processes' FW+BW in lockstep on its
    cores (the cluster's Slurm binds no task to a core: TaskPlugin=task/none)."""
    return last_json(cluster.step(
        "srun", *cluster.placement(), "--nodes=1", "--ntasks=1", str(BIN / "python"), "experiments/cluster_probe.py",
        "contention", f"--ranks={ranks}", f"--iterations={iterations}", f"--image-size={IMAGE_SIZE}",
        f"--batch={BATCH}", f"--model={MODEL}"))


def pingpong(repeats: int) -> list[str]:
    """The MPI ping-pong's command (4 MiB messages), for an srun of two ranks."""
    return [str(BIN / "python"), "-m", "hpcshuffle.scale.pingpong", str(4 << 20), str(repeats)]


def allreduce_probe(repeats: int) -> list[str]:
    """experiments/cluster_probe.py allreduce's command (the model's gradients), for an srun of two ranks."""
    return [str(BIN / "python"), "experiments/cluster_probe.py", "allreduce", f"--model={MODEL}", f"--repeats={repeats}"]


def probe(cluster: Cluster, dataset: Path, quick: bool) -> dict:
    """The cluster's measured rates: one node's storage and compute, the MPI link between two nodes
    and inside one, the gradient allreduce between two nodes."""
    started = time.perf_counter()
    files, repeats = (40, 3) if quick else (300, 20)
    node = node_rates(cluster, dataset, files, repeats)
    measured = {"node": node}
    if cluster.settings["nodes"] >= 2:
        two_nodes = ["srun", *cluster.placement(), "--nodes=2", "--ntasks-per-node=1", "--mpi=pmi2"]
        measured["link"] = last_json(cluster.step(*two_nodes, *pingpong(repeats)))
        measured["allreduce"] = last_json(cluster.step(*two_nodes, *allreduce_probe(repeats)))
    one_node = ["srun", *cluster.placement(), "--nodes=1", "--ntasks=2", "--mpi=pmi2"]
    measured["intra_node"] = last_json(cluster.step(*one_node, *pingpong(repeats)))
    link = measured.get("link")
    between = f", MPI between nodes {link['bandwidth_Bps'] / 1e6:.0f} MB/s, {link['latency_s'] * 1e6:.0f} µs" \
        if link else ""
    print(f"probes: {time.perf_counter() - started:.0f} s: shared storage {node['shared_read_Bps'] / 1e6:.0f} MB/s "
          f"and {node['shared_file_s'] * 1e3:.1f} ms per file, loading {node['loaded_per_file_s'] * 1e3:.1f} ms "
          f"per file, FW+BW {node['fwbw_per_sample_s'] * 1e3:.2f} ms per sample{between}", flush=True)
    return measured


@dataclass(frozen=True)
class Run:
    """One measured run: its `hpcshuffle scale --json` row, its steady means, what its audit found, its job."""

    nodes: int
    label: str
    row: dict
    means: dict
    problems: list[str]
    how: str


def cluster_fault(job: SlurmJob, log: Path) -> str | None:
    """What fault of the cluster (not of the run) ended `job`, if one did."""
    if job.state == "NODE_FAIL":
        return "a node failure"
    if job.exit_code.startswith("76:"):
        return "a lost peer (exit 76)"
    return fault_named(log.read_text()) if log.exists() and job.state != "COMPLETED" else None


def measure(cluster: Cluster, run_dir: Path, nodes: int, ranks_per_node: int, overrides: list[str],
            epochs: int) -> tuple[list[dict], str]:
    """The run's records (reused when complete) and a word on how its job went."""
    done = completed(run_dir, epochs)
    if done is not None:
        return done, "reused"
    run_dir.mkdir(parents=True, exist_ok=True)
    # jobs/train.sbatch skips a RUN_DIR holding .complete (its mark for a requeue after the run finished),
    # whichever job wrote it: a run trained again must not inherit an earlier job's mark
    (run_dir / ".complete").unlink(missing_ok=True)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    failed = []  # jobs a fault of the cluster ended
    while True:
        job = submit_and_wait(cluster, run_dir, nodes, ranks_per_node, train_arguments(overrides, epochs))
        log = run_dir / f"job-{job.job_id}.out"
        fault = cluster_fault(job, log)
        if fault is None or len(failed) == RETRIES:
            break
        failed.append(job.job_id)
        cluster.heal(f"job {job.job_id} ({run_dir}) ended by {fault}")
        completed(run_dir, epochs)  # the records of the cut-short run go
        (run_dir / ".complete").unlink(missing_ok=True)
    if job.state != "COMPLETED" or job.exit_code != "0:0" or len(records(run_dir)) < epochs:
        tail = log.read_text()[-3000:] if log.exists() else "(no job output)"
        sys.exit(f"job {job.job_id} into {run_dir} ended {job.state}, exit {job.exit_code}; {log}:\n{tail}")
    beside = ", ".join(f"{other} {what}" for other, what in sorted(job.others.items()))
    seconds = time.perf_counter() - started
    return records(run_dir), (f"job {job.job_id} in {seconds:.0f} s (queued {job.queued_s:.0f} s), load {load:.1f} "
                              f"before, {job.load:.1f} during" + (f"; ran beside {beside}" if beside else "")
                              + (f"; after a fault of the cluster ended job(s) {', '.join(failed)}" if failed else ""))


def run_row(nodes: int, means: dict, last: dict) -> dict:
    """One measured run in `hpcshuffle scale --json`'s schema, plus the node count (`last`: its last record)."""
    return {"nodes": nodes, "workers": last["workers"], "shuffle": last["shuffle"], "q": last["q"],
            "scope": last["scope"], **{f"{phase}_s": means[phase] for phase in PHASE_KEYS}}


def measured_run(cluster: Cluster, run_dir: Path, nodes: int, overrides: list[str], epochs: int) -> dict:
    """One run of one rank per node (reused when complete) as `run_row`'s row, with its run directory,
    every epoch's time, what its audit found (`audit_problems`: nothing lost or duplicated when empty)
    and how its job went."""
    records, how = measure(cluster, run_dir, nodes, 1, overrides, epochs)
    means = steady_means(records, skip_first=True)
    return {**run_row(nodes, means, records[-1]), "run_dir": str(run_dir.relative_to(REPO)), "epochs": len(records),
            "epoch_s_each": [r["time"]["epoch"]["max"] for r in records],
            "audit_problems": audit_problems(run_dir), "job": how}


def run_line(label: str, row: dict) -> str:
    """`measured_run`'s row as the progress line the experiments print."""
    problems = row["audit_problems"]
    return (f"{row['nodes']} node(s) {label}: epoch {row['epoch_s']:.2f} s (io {row['io_s']:.2f}, fwbw "
            f"{row['fwbw_s']:.2f}, allreduce {row['allreduce_s']:.2f}); audit "
            f"{'ok' if not problems else 'FAILED: ' + '; '.join(problems)}; {row['job']}")


def predict(platform: Path, dataset: str, rows: list[dict]) -> dict | None:
    """`hpcshuffle scale --platform <platform> --json` for the measured worker counts and strategies."""
    workers = sorted({row["workers"] for row in rows})
    qs = sorted({row["q"] for row in rows if row["shuffle"] == "partial"}) or [0.1]
    shuffles = sorted({row["shuffle"] for row in rows})
    command = [str(BIN / "hpcshuffle"), "scale", "--platform", str(platform), "--workers", *map(str, workers),
               "--shuffle", *shuffles, "--q", *map(str, qs), "--model", MODEL, "--dataset", dataset,
               "--batch", str(BATCH), "--json"]
    print(f"predictions: {' '.join(command)}", flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"predictions: none, `hpcshuffle scale` failed: {done.stderr.strip()[-600:]}", flush=True)
        return None
    return json.loads(done.stdout)


def workload(dataset: Path) -> list[str]:
    """The training overrides every run of the experiment shares: `dataset` (under /pfs) as 32×32 images,
    small_cnn, batch 32, with the audit of every sample on."""
    return ["dataset=imagefolder", f"dataset.root={dataset}", f"storage.shared_dir={PFS}", "dataset.augment=flip",
            f"dataset.image_size={IMAGE_SIZE}", f"model={MODEL}", f"batch_size={BATCH}", "audit=true"]


def run_all(cluster: Cluster, node_counts: list[int], ranks_per_node: int, epochs: int, out: Path,
            dataset: Path) -> list[Run]:
    """Every (nodes, strategy) run, each one job under `out`/runs, with a progress line per run."""
    common = workload(dataset)
    runs: list[Run] = []
    for nodes in node_counts:
        for label in STRATEGIES:
            run_dir = out / "runs" / f"N{nodes}x{ranks_per_node}" / label
            run_records, how = measure(cluster, run_dir, nodes, ranks_per_node,
                                       [*common, *strategy_overrides(label)], epochs)
            means = steady_means(run_records, skip_first=True)
            run = Run(nodes, label, run_row(nodes, means, run_records[-1]), means,
                      [f"{run_dir}: {problem}" for problem in audit_problems(run_dir)], how)
            runs.append(run)
            phases = ", ".join(f"{phase} {means[phase]:.2f}" for phase in PHASE_KEYS[1:])
            audit = "ok" if not run.problems else "FAILED: " + "; ".join(run.problems)
            print(f"[{len(runs)}/{len(node_counts) * len(STRATEGIES)}] {nodes} node(s) {label}: epoch "
                  f"{means['epoch']:.2f} s ({phases}); audit {audit}; {how}", flush=True)
    return runs


