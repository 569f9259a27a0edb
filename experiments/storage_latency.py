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
handling: hpcshuffle/studies/cluster_runs.py), with the storage node's reads delayed (`cluster.sh up
--storage-latency-ms 5`):

    flock /tmp/hpcshuffle-measure.lock python experiments/storage_latency.py cluster-runs \\
        [--nodes 2 3] [--strategies global local] [--io-threads 4] [--out results/reference/cluster/oos]

writes each run under `<out>/runs/N<nodes>x1/<strategy>/` and `<out>/runs.json`, `<out>/runs.txt`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hpcshuffle.storage.read_latency import FILE_BYTES, POOL_FILES, prepare, probe, warm


def on_node(args: argparse.Namespace) -> None:
    """What `cluster` runs on the login node (prepare) and on the nodes under srun (warm, probe)."""
    if args.command == "prepare":
        prepare(args.root, POOL_FILES, FILE_BYTES)
    elif args.command == "warm":
        print(json.dumps({"seconds": warm(args.root, POOL_FILES)}))
    else:
        node = int(os.environ.get("SLURM_PROCID", "0"))
        result = json.dumps(probe(args.root, POOL_FILES, args.nodes, node, args.readers, args.per_reader, args.seed,
                                  args.start_at))
        if args.result is None:
            print(result, flush=True)
        else:
            args.result.with_name(f"{args.result.name}-{node}.json").write_text(result)


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
    if args.command in ("prepare", "warm", "probe"):
        on_node(args)
        return
    # not on the nodes: a probe imports only what reads, so that it starts well within --lead-s
    from hpcshuffle.studies.storage_latency import (
        cluster_runs,
        measure_cluster,
        measure_local,
        save,
        write_table,
    )

    if args.command == "table":
        write_table(args.out)
    elif args.command == "cluster-runs":
        cluster_runs(args.out, args.nodes, args.strategies, args.io_threads, args.workers, args.epochs, args.samples,
                     args.require_latency_ms)
    else:
        if min(args.readers) < 1 or args.reads < 1 or args.repeats < 1:
            parser.error("--readers, --reads and --repeats must be >= 1")
        if 1 not in args.readers:
            print("note: without k = 1 there is no mean(k)/mean(1)", flush=True)
        if args.command == "local":
            measured = measure_local(args.readers, args.reads, args.repeats)
        else:
            measured = measure_cluster(Path(__file__).resolve(), args.nodes, args.readers, args.reads, args.repeats,
                                       args.lead_s)
        save(args.out, *measured, [Path(sys.executable).name, *sys.argv])


if __name__ == "__main__":
    main()
