"""Per-file read times of shared storage under load: k = 1, 2, 4, 8, 16 concurrent readers on each
of 1, 2 or 3 nodes, for the SimGrid scale model (hpcshuffle/scale/), which needs to know how a
file's read time and its spread grow when many clients share one storage server.

What is timed: one reader is a thread that opens a file, reads it whole and closes it, as global
shuffling reads a sample (hpcshuffle.files.read_chunks with `uncached`: the file's pages dropped
from the node's page cache after the read; the mounts of scripts/shared_fs.sh and
scripts/cluster.sh also use direct-io-mode=enable with the client's caches off, so every read
crosses FUSE and TCP to the brick). Each reader reads its own distinct files of a pool of
~100 KB files of random bytes; a node's k readers together read at least --reads files per point,
and all readers of all nodes start at the same instant. The pool is read once, untimed, before
the first point, so the storage server's own page cache is as warm as after a run's first epoch
(the brick's files are then read from its memory, over TCP and FUSE still).

Two targets:

- `local`: the single-node GlusterFS volume of `bash scripts/shared_fs.sh start` (its mount is
  asked for, never started here), readers in this process.
- `cluster`: the namespace cluster of `bash scripts/cluster.sh up` (it starts none); one `srun`
  task per node (`--nodes N --ntasks-per-node 1`), each with k reader threads, the pool on /pfs.
  The label carries the cluster's settings, e.g. `nscluster-lat5ms` with --storage-latency-ms 5.

Per (target, nodes, k, repeat), over every file read on every node: files/s (all files over the
wall time from the common start to the last reader's end), the per-file mean, p50, p90, p99 and
max, cv (std/mean), mean(k)/mean(1) and p99(k)/p99(1) against the same repeat's k = 1 at the same
node count, and a lognormal fitted by its log-moments: its cv (sqrt(exp(s^2) - 1)) and its p99/p50
(exp(2.326 s)) beside the measured p99/p50 (measured above lognormal's: a heavier tail).

    flock /tmp/hpcshuffle-measure.lock python experiments/storage_latency.py local \\
        [--readers 1 2 4 8 16] [--reads 400] [--repeats 2] [--out results/reference/storage]
    flock /tmp/hpcshuffle-measure.lock python experiments/storage_latency.py cluster [--nodes 1 2 3] ...
    python experiments/storage_latency.py table [--out results/reference/storage]

Each measuring command replaces its own target's rows in `<out>/latency.json` (every repeat's row,
the settings, the machine's load average before and after each point) and writes
`<out>/latency.txt`, the table over all targets there (each cell the range over repeats).

Out-of-sample runs on the cluster, for the scale model to be checked against (GS and LS with
loader.io_threads=4, one rank per node, experiments/cluster_scaling.py's workload and job
handling, imported from it), with the storage node's reads delayed (`cluster.sh up
--storage-latency-ms 5`):

    flock /tmp/hpcshuffle-measure.lock python experiments/storage_latency.py cluster-runs \\
        [--nodes 2 3] [--strategies global local] [--io-threads 4] [--out results/reference/cluster/oos]

writes each run under `<out>/runs/N<nodes>x1/<strategy>/` and `<out>/runs.json`, `<out>/runs.txt`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILE_BYTES = 102_400  # ~100 KB: a JPEG of ImageNet's mean size
POOL_FILES = 1_500  # enough for 3 nodes x 400 distinct files per point
POOL_DIR = "storage_latency"  # under the mount
PFS = Path("/pfs")
Z99, Z90 = 2.3263478740408408, 1.2815515655446004  # standard normal quantiles


# ---------------------------------------------------------------- pure: statistics of read times

def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`, linear between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def lognormal_fit(times: list[float]) -> dict:
    """A lognormal fitted to positive `times` by the moments of their logarithms: mu, sigma, and what
    it implies (cv, p50, p90/p50, p99/p50), to hold against the measured spread."""
    if len(times) < 2 or min(times) <= 0:
        raise ValueError("a lognormal fit needs at least two positive times")
    logs = [math.log(t) for t in times]
    mu, sigma = statistics.fmean(logs), statistics.stdev(logs)
    return {"mu": mu, "sigma": sigma, "cv": math.sqrt(math.expm1(sigma * sigma)), "p50_s": math.exp(mu),
            "p90_over_p50": math.exp(Z90 * sigma), "p99_over_p50": math.exp(Z99 * sigma)}


def summarize(times: list[float], window_s: float) -> dict:
    """Per-file read times (seconds) of one point and the wall time they took together: throughput,
    mean, percentiles, spread, the lognormal fit and whether the tail is heavier than the fit's."""
    mean = statistics.fmean(times)
    p50, p99 = percentile(times, 50), percentile(times, 99)
    fit = lognormal_fit(times)
    return {"files": len(times), "window_s": window_s, "files_per_s": len(times) / window_s, "mean_s": mean,
            "p50_s": p50, "p90_s": percentile(times, 90), "p99_s": p99, "max_s": max(times),
            "cv": statistics.pstdev(times) / mean, "p99_over_p50": p99 / p50, "lognormal": fit,
            "tail_heavier_than_lognormal": p99 / p50 > fit["p99_over_p50"]}


def with_ratios(rows: list[dict]) -> list[dict]:
    """`rows` with mean(k)/mean(1) and p99(k)/p99(1), each against the row of k = 1 with the same
    target, node count and repeat (None where that row is missing)."""
    single = {(r["target"], r["nodes"], r["repeat"]): r for r in rows if r["readers"] == 1}
    out = []
    for row in rows:
        base = single.get((row["target"], row["nodes"], row["repeat"]))
        out.append({**row, "mean_over_k1": row["mean_s"] / base["mean_s"] if base else None,
                    "p99_over_k1": row["p99_s"] / base["p99_s"] if base else None})
    return out


def assignment(pool: int, nodes: int, node: int, readers: int, per_reader: int, seed: int) -> list[list[int]]:
    """The file indices each of `readers` readers on `node` (of `nodes`) reads: a seeded permutation
    of the pool cut into distinct pieces, so no file is read twice in a point, on any node."""
    import random

    needed = nodes * readers * per_reader
    if needed > pool:
        raise ValueError(f"{nodes} node(s) x {readers} readers x {per_reader} files need {needed} files, "
                         f"the pool has {pool}")
    order = list(range(pool))
    random.Random(seed).shuffle(order)
    start = node * readers * per_reader
    return [order[start + r * per_reader:start + (r + 1) * per_reader] for r in range(readers)]


def span(values: list[float], fmt: str) -> str:
    """A range over repeats, e.g. `2.31-2.40` (one value when they print the same)."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def table(rows: list[dict]) -> str:
    """The rows (repeats of each point merged into ranges) as printed text."""
    rows = with_ratios(rows)
    points: dict[tuple, list[dict]] = {}
    for row in rows:
        points.setdefault((row["target"], row["nodes"], row["readers"]), []).append(row)
    head = (f"{'target':<18} {'N':>2} {'k':>3} {'files/s':>11} {'mean ms':>11} {'p50 ms':>11} {'p90 ms':>11} "
            f"{'p99 ms':>13} {'max ms':>13} {'cv':>9} {'mean/k1':>9} {'p99/k1':>9} {'LN cv':>9} "
            f"{'p99/p50':>11} {'LN p99/p50':>10}")
    title = ("per-file read times (open + read 100 KB + close) with k reader threads on each of N nodes; each cell "
             "the range over repeats; LN: the lognormal fitted to the log-moments")
    lines = [title, head]
    for (target, nodes, readers), group in sorted(points.items()):
        def cell(key: str, fmt: str, scale: float = 1.0, width: int = 11, source=group) -> str:
            values = [r[key] * scale for r in source if r.get(key) is not None]
            return f"{span(values, fmt) if values else '-':>{width}}"
        lognormal = [{"cv": r["lognormal"]["cv"], "ratio": r["lognormal"]["p99_over_p50"]} for r in group]
        lines.append(f"{target:<18} {nodes:>2} {readers:>3} {cell('files_per_s', '.0f')} {cell('mean_s', '.2f', 1e3)} "
                     f"{cell('p50_s', '.2f', 1e3)} {cell('p90_s', '.2f', 1e3)} {cell('p99_s', '.2f', 1e3, 13)} "
                     f"{cell('max_s', '.1f', 1e3, 13)} {cell('cv', '.2f', width=9)} "
                     f"{cell('mean_over_k1', '.2f', width=9)} {cell('p99_over_k1', '.2f', width=9)} "
                     f"{cell('cv', '.2f', width=9, source=lognormal)} {cell('p99_over_p50', '.2f')} "
                     f"{cell('ratio', '.2f', width=10, source=lognormal)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- reading (on the node that reads)

def pool_path(root: Path, index: int) -> Path:
    return root / f"{index // 500:02d}" / f"f{index:05d}.bin"


def prepare(root: Path, files: int, nbytes: int) -> None:
    """Write the pool of `files` files of `nbytes` random bytes under `root` unless it is complete."""
    mark = root / f".complete-{files}x{nbytes}"
    if mark.exists():
        return
    for index in range(files):
        path = pool_path(root, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(nbytes))
    mark.write_text("")


def read_whole(path: Path) -> int:
    """Read a file as global shuffling reads a sample from shared storage (pages dropped after)."""
    from hpcshuffle.files import read_chunks

    return sum(len(chunk) for chunk in read_chunks(path, uncached=True))


def probe(root: Path, pool: int, nodes: int, node: int, readers: int, per_reader: int, seed: int,
          start_at: float | None) -> dict:
    """k reader threads on this node, each reading its files one after the other, all starting at
    `start_at` (wall clock, shared by the nodes of one machine) or at once; every file's seconds."""
    import hpcshuffle.files  # noqa: F401  (imported before the start: not timed)

    plan = assignment(pool, nodes, node, readers, per_reader, seed)
    times: list[list[float]] = [[] for _ in range(readers)]
    ends = [0.0] * readers
    nbytes = [0] * readers
    ready = threading.Barrier(readers + 1)

    def reader(slot: int) -> None:
        ready.wait()
        for index in plan[slot]:
            started = time.perf_counter()
            nbytes[slot] += read_whole(pool_path(root, index))
            times[slot].append(time.perf_counter() - started)
        ends[slot] = time.time()

    threads = [threading.Thread(target=reader, args=(slot,), daemon=True) for slot in range(readers)]
    for thread in threads:
        thread.start()
    late = 0.0
    if start_at is not None:
        late = time.time() - start_at
        if late < 0:
            time.sleep(-late)
    start = time.time()
    ready.wait()
    for thread in threads:
        thread.join()
    return {"host": socket.gethostname(), "node": node, "readers": readers, "start": start, "end": max(ends),
            "late_s": max(late, 0.0), "bytes": sum(nbytes), "times": [t for slot in times for t in slot]}


def warm(root: Path, pool: int, threads: int = 4) -> float:
    """Read the whole pool once, untimed in the results (the server's cache then holds it); seconds."""
    started = time.perf_counter()
    indices = list(range(pool))
    workers = [threading.Thread(target=lambda part: [read_whole(pool_path(root, i)) for i in part],
                                args=(indices[slot::threads],)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


# ---------------------------------------------------------------- driving the points

def point_row(target: str, nodes: int, readers: int, repeat: int, parts: list[dict], load: tuple) -> dict:
    """One point's row from the probes of its nodes."""
    times = [t for part in parts for t in part["times"]]
    start, end = min(p["start"] for p in parts), max(p["end"] for p in parts)
    return {"target": target, "nodes": nodes, "readers": readers, "repeat": repeat, **summarize(times, end - start),
            "late_s": max(p["late_s"] for p in parts), "hosts": sorted(p["host"] for p in parts),
            "node_mean_s": [statistics.fmean(p["times"]) for p in sorted(parts, key=lambda p: p["node"])],
            "load_before": load[0], "load_after": load[1]}


def per_reader(reads: int, readers: int) -> int:
    return -(-reads // readers)


def measure_local(args: argparse.Namespace) -> tuple[str, dict, list[dict]]:
    from hpcshuffle.storage.shared_io import mount_of, shared_mount

    mount, how = shared_mount(start=False)
    if mount is None:
        sys.exit(f"no single-node GlusterFS mount ({how}): start it with `bash scripts/shared_fs.sh start`")
    root = mount / POOL_DIR / f"pool-{POOL_FILES}x{FILE_BYTES}"
    prepare(root, POOL_FILES, FILE_BYTES)
    settings = {"mount": str(mount), "fs": mount_of(mount).fs_type, "pool": str(root), "file_bytes": FILE_BYTES,
                "pool_files": POOL_FILES, "warm_s": warm(root, POOL_FILES), "cpus": os.cpu_count()}
    rows = []
    for repeat in range(1, args.repeats + 1):
        for readers in args.readers:
            load = os.getloadavg()[0]
            part = probe(root, POOL_FILES, 1, 0, readers, per_reader(args.reads, readers),
                         seed=repeat * 1000 + readers, start_at=None)
            rows.append(point_row("gluster-1node", 1, readers, repeat, [part], (load, os.getloadavg()[0])))
            progress(rows[-1])
    return "gluster-1node", settings, rows


def measure_cluster(args: argparse.Namespace) -> tuple[str, dict, list[dict]]:
    import tempfile

    from hpcshuffle.studies.cluster import BIN, connect

    # the nodes see this machine's files but /tmp (each has its own): results go under /var/tmp
    with tempfile.TemporaryDirectory(prefix="storage-latency-") as workdir, \
            tempfile.TemporaryDirectory(prefix="storage-latency-", dir="/var/tmp") as workdir_shared:
        cluster = connect(cluster_script(Path(workdir)), max(args.nodes))
        settings = dict(cluster.settings)
        target = f"nscluster-lat{settings.get('storage_latency_ms', 0)}ms"
        root = PFS / POOL_DIR / f"pool-{POOL_FILES}x{FILE_BYTES}"
        me = [str(BIN / "python"), str(Path(__file__).resolve())]
        cluster.run(*me, "prepare", f"--root={root}")  # on the login node, through GlusterFS
        warmed = last_line(cluster.step("srun", *cluster.placement(), "--nodes=1", "--ntasks=1", *me, "warm",
                                        f"--root={root}"))
        settings.update(pool=str(root), file_bytes=FILE_BYTES, pool_files=POOL_FILES, warm_s=warmed["seconds"],
                        cpus=os.cpu_count())
        rows = []
        for repeat in range(1, args.repeats + 1):
            for nodes in args.nodes:
                for readers in args.readers:
                    load = os.getloadavg()[0]
                    start_at = time.time() + args.lead_s
                    results = Path(workdir_shared) / f"r{repeat}-n{nodes}-k{readers}"
                    cluster.step(
                        "srun", *cluster.placement(), f"--nodes={nodes}", "--ntasks-per-node=1", "--cpus-per-task=1",
                        *me, "probe", f"--root={root}", f"--nodes={nodes}", f"--readers={readers}",
                        f"--per-reader={per_reader(args.reads, readers)}", f"--seed={repeat * 1000 + readers}",
                        f"--start-at={start_at}", f"--result={results}")
                    # a file per task: srun forwards the tasks' stdout in pieces that interleave
                    parts = [json.loads(path.read_text()) for path in sorted(results.parent.glob(f"{results.name}-*.json"))]
                    if len(parts) != nodes:
                        sys.exit(f"expected {nodes} probe results under {results.parent}, got {len(parts)}")
                    rows.append(point_row(target, nodes, readers, repeat, parts, (load, os.getloadavg()[0])))
                    progress(rows[-1])
    return target, settings, rows


def cluster_script(workdir: Path) -> Path:
    """cluster_scaling.snapshot's copy of scripts/cluster.sh, with every script it sources beside it
    (it sources processes.sh too, which that copy lacks)."""
    import shutil

    from hpcshuffle.studies.cluster import snapshot

    script = snapshot(workdir)
    for sourced in (REPO / "scripts").glob("*.sh"):
        if sourced.name in script.read_text() and not (workdir / sourced.name).exists():
            shutil.copy2(sourced, workdir / sourced.name)
    return script


def last_line(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def progress(row: dict) -> None:
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
    data = json.loads((out / "latency.json").read_text())
    text = table(data["rows"])
    (out / "latency.txt").write_text(text + "\n")
    print(text)


# ---------------------------------------------------------------- out-of-sample runs on the cluster

def cluster_runs(args: argparse.Namespace) -> None:
    """GS / LS runs on the cluster with other loader settings than experiments/cluster_scaling.py's,
    through its own job handling (submit, wait, retry after a fault, audit)."""
    import tempfile

    from hpcshuffle.analysis.audit import audit_problems
    from hpcshuffle.analysis.report import steady_means
    from hpcshuffle.studies.cluster import PFS as CLUSTER_PFS
    from hpcshuffle.studies.cluster import connect
    from hpcshuffle.studies.cluster_runs import (
        BATCH,
        IMAGE_SIZE,
        MODEL,
        ensure_dataset,
        measure,
        run_row,
    )
    from hpcshuffle.studies.runs import strategy_overrides

    out = args.out if args.out.is_absolute() else REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    rows, lines = [], []
    with tempfile.TemporaryDirectory(prefix="storage-latency-runs-") as workdir:
        cluster = connect(cluster_script(Path(workdir)), max(args.nodes))
        if args.require_latency_ms is not None and cluster.settings.get("storage_latency_ms") != args.require_latency_ms:
            sys.exit(f"the cluster is up with {cluster.settings}; these runs want storage_latency_ms="
                     f"{args.require_latency_ms} (bash scripts/cluster.sh down; up --storage-latency-ms ...)")
        dataset = ensure_dataset(cluster, args.samples)
        common = ["dataset=imagefolder", f"dataset.root={dataset}", f"storage.shared_dir={CLUSTER_PFS}",
                  "dataset.augment=flip", f"dataset.image_size={IMAGE_SIZE}", f"model={MODEL}",
                  f"batch_size={BATCH}", "audit=true", f"loader.io_threads={args.io_threads}",
                  f"loader.workers={args.workers}"]
        for nodes in args.nodes:
            for label in args.strategies:
                run_dir = out / "runs" / f"N{nodes}x1" / label
                records, how = measure(cluster, run_dir, nodes, 1, [*common, *strategy_overrides(label)], args.epochs)
                means = steady_means(records, skip_first=True)
                problems = audit_problems(run_dir)
                rows.append({**run_row(nodes, means, records[-1]), "run_dir": str(run_dir.relative_to(REPO)),
                             "epochs": len(records), "epoch_s_each": [r["time"]["epoch"]["max"] for r in records],
                             "audit_problems": problems, "job": how})
                line = (f"{nodes} node(s) {label}: epoch {means['epoch']:.2f} s (io {means['io']:.2f}, fwbw "
                        f"{means['fwbw']:.2f}, allreduce {means['allreduce']:.2f}); audit "
                        f"{'ok' if not problems else 'FAILED: ' + '; '.join(problems)}; {how}")
                lines.append(line)
                print(line, flush=True)
    (out / "runs.json").write_text(json.dumps({"cluster": cluster.settings, "overrides": common,
                                               "samples": args.samples, "runs": rows}, indent=1) + "\n")
    (out / "runs.txt").write_text("seconds per epoch after the first (epoch: slowest rank; phases: mean over ranks)\n"
                                  + "\n".join(lines) + "\n")


# ---------------------------------------------------------------- command line

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("local", "cluster"):
        sub = commands.add_parser(name, help=f"measure the {name} target")
        sub.add_argument("--readers", type=int, nargs="+", default=[1, 2, 4, 8, 16], metavar="K")
        sub.add_argument("--reads", type=int, default=400, help="files read per node per point (at least)")
        sub.add_argument("--repeats", type=int, default=2)
        sub.add_argument("--out", type=Path, default=Path("results/reference/storage"))
        if name == "cluster":
            sub.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3], metavar="N")
            sub.add_argument("--lead-s", type=float, default=3.0,
                             help="the common start this many seconds after submitting each srun")
    sub = commands.add_parser("table", help="print and write <out>/latency.txt from <out>/latency.json")
    sub.add_argument("--out", type=Path, default=Path("results/reference/storage"))
    sub = commands.add_parser("cluster-runs", help="out-of-sample training runs on the cluster")
    sub.add_argument("--nodes", type=int, nargs="+", default=[2, 3])
    sub.add_argument("--strategies", nargs="+", default=["global", "local"])
    sub.add_argument("--io-threads", type=int, default=4)
    sub.add_argument("--workers", type=int, default=0, help="loader.workers")
    sub.add_argument("--epochs", type=int, default=3)
    sub.add_argument("--samples", type=int, default=3000)
    sub.add_argument("--require-latency-ms", type=int, default=5)
    sub.add_argument("--out", type=Path, default=Path("results/reference/cluster/oos"))
    # on a node (what `cluster` runs under srun)
    sub = commands.add_parser("prepare", help=argparse.SUPPRESS)
    sub.add_argument("--root", type=Path, required=True)
    sub = commands.add_parser("warm", help=argparse.SUPPRESS)
    sub.add_argument("--root", type=Path, required=True)
    sub = commands.add_parser("probe", help=argparse.SUPPRESS)
    sub.add_argument("--root", type=Path, required=True)
    sub.add_argument("--nodes", type=int, required=True)
    sub.add_argument("--readers", type=int, required=True)
    sub.add_argument("--per-reader", type=int, required=True)
    sub.add_argument("--seed", type=int, required=True)
    sub.add_argument("--start-at", type=float, default=None)
    sub.add_argument("--result", type=Path, default=None, help="write to RESULT-<node>.json instead of stdout")
    args = parser.parse_args()

    if args.command == "prepare":
        prepare(args.root, POOL_FILES, FILE_BYTES)
    elif args.command == "warm":
        print(json.dumps({"seconds": warm(args.root, POOL_FILES)}))
    elif args.command == "probe":
        node = int(os.environ.get("SLURM_PROCID", "0"))
        result = json.dumps(probe(args.root, POOL_FILES, args.nodes, node, args.readers, args.per_reader, args.seed,
                                  args.start_at))
        if args.result is None:
            print(result, flush=True)
        else:
            args.result.with_name(f"{args.result.name}-{node}.json").write_text(result)
    elif args.command == "table":
        write_table(args.out)
    elif args.command == "cluster-runs":
        cluster_runs(args)
    else:
        if min(args.readers) < 1 or args.reads < 1 or args.repeats < 1:
            parser.error("--readers, --reads and --repeats must be >= 1")
        if 1 not in args.readers:
            print("note: without k = 1 there is no mean(k)/mean(1)", flush=True)
        measured = measure_local(args) if args.command == "local" else measure_cluster(args)
        save(args.out, *measured, [Path(sys.executable).name, *sys.argv])


if __name__ == "__main__":
    main()
