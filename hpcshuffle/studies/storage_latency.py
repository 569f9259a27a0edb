"""The storage-latency experiment's driving (experiments/storage_latency.py): its points on the local
GlusterFS volume (readers in this process) and on the namespace cluster (one srun task per node, each
running the script's `probe`), one row per point, the results file and its table; and out-of-sample
GS / LS runs on the cluster, through the cluster scaling experiment's job handling."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcshuffle.analysis.read_times import summarize, table, with_ratios
from hpcshuffle.storage.read_latency import FILE_BYTES, POOL_FILES, prepare, probe, warm
from hpcshuffle.storage.shared_io import mount_of, shared_mount
from hpcshuffle.studies.cluster import PFS, connect, snapshot
from hpcshuffle.studies.cluster_runs import (
    ensure_dataset,
    last_json,
    measured_run,
    run_line,
    workload,
)
from hpcshuffle.studies.runs import BIN, REPO, strategy_overrides

POOL_DIR = "storage_latency"  # under the mount


def point_row(target: str, nodes: int, readers: int, repeat: int, parts: list[dict], load: tuple) -> dict:
    """One point's row from the probes of its nodes."""
    times = [t for part in parts for t in part["times"]]
    start, end = min(p["start"] for p in parts), max(p["end"] for p in parts)
    return {"target": target, "nodes": nodes, "readers": readers, "repeat": repeat, **summarize(times, end - start),
            "late_s": max(p["late_s"] for p in parts), "hosts": sorted(p["host"] for p in parts),
            "node_mean_s": [statistics.fmean(p["times"]) for p in sorted(parts, key=lambda p: p["node"])],
            "load_before": load[0], "load_after": load[1]}


def per_reader(reads: int, readers: int) -> int:
    """Files each of `readers` readers reads so that together they read at least `reads`."""
    return -(-reads // readers)


def measure_local(readers_each: list[int], reads: int, repeats: int) -> tuple[str, dict, list[dict]]:
    """Every point on the single-node GlusterFS volume of scripts/shared_fs.sh (asked for, never started
    here): (its target, its settings, a row per point), `repeats` rounds of every k in `readers_each`."""
    mount, how = shared_mount(start=False)
    if mount is None:
        sys.exit(f"no single-node GlusterFS mount ({how}): start it with `bash scripts/shared_fs.sh start`")
    root = mount / POOL_DIR / f"pool-{POOL_FILES}x{FILE_BYTES}"
    prepare(root, POOL_FILES, FILE_BYTES)
    settings = {"mount": str(mount), "fs": mount_of(mount).fs_type, "pool": str(root), "file_bytes": FILE_BYTES,
                "pool_files": POOL_FILES, "warm_s": warm(root, POOL_FILES), "cpus": os.cpu_count()}
    rows = []
    for repeat in range(1, repeats + 1):
        for readers in readers_each:
            load = os.getloadavg()[0]
            part = probe(root, POOL_FILES, 1, 0, readers, per_reader(reads, readers),
                         seed=repeat * 1000 + readers, start_at=None)
            rows.append(point_row("gluster-1node", 1, readers, repeat, [part], (load, os.getloadavg()[0])))
            progress(rows[-1])
    return "gluster-1node", settings, rows


def measure_cluster(script: Path, node_counts: list[int], readers_each: list[int], reads: int, repeats: int,
                    lead_s: float) -> tuple[str, dict, list[dict]]:
    """Every point on the namespace cluster's /pfs (it starts none), each node's readers the srun task
    `script probe ...` (experiments/storage_latency.py), all starting `lead_s` after the srun: (its
    target, named after the cluster's storage latency, its settings, a row per point)."""
    # the nodes see this machine's files but /tmp (each has its own): results go under /var/tmp
    with tempfile.TemporaryDirectory(prefix="storage-latency-") as workdir, \
            tempfile.TemporaryDirectory(prefix="storage-latency-", dir="/var/tmp") as workdir_shared:
        cluster = connect(cluster_script(Path(workdir)), max(node_counts))
        settings = dict(cluster.settings)
        target = f"nscluster-lat{settings.get('storage_latency_ms', 0)}ms"
        root = PFS / POOL_DIR / f"pool-{POOL_FILES}x{FILE_BYTES}"
        me = [str(BIN / "python"), str(script)]
        cluster.run(*me, "prepare", f"--root={root}")  # on the login node, through GlusterFS
        warmed = last_json(cluster.step("srun", *cluster.placement(), "--nodes=1", "--ntasks=1", *me, "warm",
                                        f"--root={root}"))
        settings.update(pool=str(root), file_bytes=FILE_BYTES, pool_files=POOL_FILES, warm_s=warmed["seconds"],
                        cpus=os.cpu_count())
        rows = []
        for repeat in range(1, repeats + 1):
            for nodes in node_counts:
                for readers in readers_each:
                    load = os.getloadavg()[0]
                    start_at = time.time() + lead_s
                    results = Path(workdir_shared) / f"r{repeat}-n{nodes}-k{readers}"
                    cluster.step(
                        "srun", *cluster.placement(), f"--nodes={nodes}", "--ntasks-per-node=1", "--cpus-per-task=1",
                        *me, "probe", f"--root={root}", f"--nodes={nodes}", f"--readers={readers}",
                        f"--per-reader={per_reader(reads, readers)}", f"--seed={repeat * 1000 + readers}",
                        f"--start-at={start_at}", f"--result={results}")
                    # a file per task: srun forwards the tasks' stdout in pieces that interleave
                    parts = [json.loads(path.read_text()) for path in sorted(results.parent.glob(f"{results.name}-*.json"))]
                    if len(parts) != nodes:
                        sys.exit(f"expected {nodes} probe results under {results.parent}, got {len(parts)}")
                    rows.append(point_row(target, nodes, readers, repeat, parts, (load, os.getloadavg()[0])))
                    progress(rows[-1])
    return target, settings, rows


def cluster_script(workdir: Path) -> Path:
    """cluster.snapshot's copy of scripts/cluster.sh, with every script it names beside it (any that
    snapshot does not copy)."""
    script = snapshot(workdir)
    for sourced in (REPO / "scripts").glob("*.sh"):
        if sourced.name in script.read_text() and not (workdir / sourced.name).exists():
            shutil.copy2(sourced, workdir / sourced.name)
    return script


def progress(row: dict) -> None:
    """Print a point's line: throughput, mean, p50, p99, cv, how late it started and the load."""
    print(f"{row['target']} N={row['nodes']} k={row['readers']:>2} repeat {row['repeat']}: "
          f"{row['files_per_s']:.0f} files/s, mean {row['mean_s'] * 1e3:.2f} ms, p50 {row['p50_s'] * 1e3:.2f}, "
          f"p99 {row['p99_s'] * 1e3:.2f}, cv {row['cv']:.2f} (late {row['late_s']:.2f} s, load "
          f"{row['load_before']:.1f}->{row['load_after']:.1f})", flush=True)


def save(out: Path, target: str, settings: dict, rows: list[dict], argv: list[str]) -> None:
    """Replace `target`'s rows in <out>/latency.json and write <out>/latency.txt over every target."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "latency.json"
    data = json.loads(path.read_text()) if path.exists() else {"targets": {}, "rows": []}
    data["targets"][target] = {"settings": settings, "command": " ".join(argv),
                               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": socket.gethostname()}
    data["rows"] = with_ratios([r for r in data["rows"] if r["target"] != target] + rows)
    path.write_text(json.dumps(data, indent=1) + "\n")
    write_table(out)


def write_table(out: Path) -> None:
    """Print and write <out>/latency.txt, the table of every target in <out>/latency.json."""
    data = json.loads((out / "latency.json").read_text())
    text = table(data["rows"])
    (out / "latency.txt").write_text(text + "\n")
    print(text)


def cluster_runs(out: Path, node_counts: list[int], strategies: list[str], io_threads: int, loader_workers: int,
                 epochs: int, samples: int, require_latency_ms: int | None) -> None:
    """GS / LS runs on the cluster with other loader settings than experiments/cluster_scaling.py's,
    through its own job handling (submit, wait, retry after a fault, audit), one rank per node, on a
    cluster whose brick delays reads by `require_latency_ms` (None: any); writes <out>/runs.json and
    runs.txt."""
    out = out if out.is_absolute() else REPO / out
    out.mkdir(parents=True, exist_ok=True)
    rows, lines = [], []
    with tempfile.TemporaryDirectory(prefix="storage-latency-runs-") as workdir:
        cluster = connect(cluster_script(Path(workdir)), max(node_counts))
        if require_latency_ms is not None and cluster.settings.get("storage_latency_ms") != require_latency_ms:
            sys.exit(f"the cluster is up with {cluster.settings}; these runs want storage_latency_ms="
                     f"{require_latency_ms} (bash scripts/cluster.sh down; up --storage-latency-ms ...)")
        dataset = ensure_dataset(cluster, samples)
        common = [*workload(dataset), f"loader.io_threads={io_threads}", f"loader.workers={loader_workers}"]
        for nodes in node_counts:
            for label in strategies:
                row = measured_run(cluster, out / "runs" / f"N{nodes}x1" / label, nodes,
                                   [*common, *strategy_overrides(label)], epochs)
                rows.append(row)
                lines.append(run_line(label, row))
                print(lines[-1], flush=True)
    (out / "runs.json").write_text(json.dumps({"cluster": cluster.settings, "overrides": common,
                                               "samples": samples, "runs": rows}, indent=1) + "\n")
    (out / "runs.txt").write_text("seconds per epoch after the first (epoch: slowest rank; phases: mean over ranks)\n"
                                  + "\n".join(lines) + "\n")
