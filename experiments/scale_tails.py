"""The client factor's family, lognormal or Pareto, tested (issue 46): analysis and measurement.

Analysis (pure computation, seconds): on `abci` with fit.txt's fitted values (experiments/scale_fit.py),
the slowest-of-M client factor and ResNet-50's GS/LS, median (p10-p90) over seeds, for M nodes in
4..512, under the fitted lognormal and two Pareto factors of the same mean (same cv; same median slowest
of 128 nodes, the fit's 512 workers). Measurement: K reader processes reading distinct ~100 KB files at once from the GlusterFS volume
of scripts/shared_fs.sh (caches off, direct-io), each file's time recorded per reader; the families are
compared on the per-file times (whole and tail) and on the per-reader factors (hpcshuffle/studies/tails.py).

    flock /tmp/hpcshuffle-measure.lock python experiments/scale_tails.py measure \\
        [--readers 4 8 16] [--files 250] [--repeats 3] [--out results/reference/scale]
    python experiments/scale_tails.py [report] [--out results/reference/scale]

`measure` writes every file's time to <out>/tails_measured.json (then writes the report); `report` writes
<out>/tails.txt: the analysis, the measurement's statistics where tails_measured.json is there, and the
per-node factors of the namespace-cluster points in results/reference/storage/latency.json and in
<out>/tails_cluster_latency.json, made for this by

    bash scripts/cluster.sh up --nodes 3 --storage-link 1gbit --storage-latency-ms 2
    flock /tmp/hpcshuffle-measure.lock python experiments/storage_latency.py cluster --nodes 3 \
        --readers 1 4 8 --reads 400 --repeats 3 --out <a scratch dir>   # then its latency.json copied there
    bash scripts/cluster.sh down
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

POOL_DIR = "tails_pool"  # under the mount


def measure(args: argparse.Namespace) -> None:
    """Every point's per-reader file times on the GlusterFS volume, into <out>/tails_measured.json."""
    from hpcshuffle.storage.read_latency import FILE_BYTES, prepare, warm
    from hpcshuffle.storage.shared_io import shared_volume
    from hpcshuffle.studies.tails import measure_point

    pool = max(args.readers) * args.files
    points = []
    with shared_volume() as (mount, found):
        if mount is None:
            sys.exit(f"needs the GlusterFS volume: {found} (bash scripts/shared_fs.sh start, as root)")
        root = mount / POOL_DIR
        started = time.perf_counter()
        prepare(root, pool, FILE_BYTES)
        print(f"pool of {pool} files ready in {time.perf_counter() - started:.1f} s; warming", flush=True)
        warm_s = warm(root, pool)
        for repeat in range(1, args.repeats + 1):
            for readers in args.readers:
                load_before = os.getloadavg()[0]
                times = measure_point(root, pool, readers, args.files, seed=1000 * repeat + readers)
                points.append({"readers": readers, "repeat": repeat, "files_per_reader": args.files,
                               "load_before": load_before, "load_after": os.getloadavg()[0], "times": times})
                means = [1e3 * sum(t) / len(t) for t in times]
                print(f"repeat {repeat} K={readers}: reader means {min(means):.2f}-{max(means):.2f} ms", flush=True)
    settings = {"target": "gluster-1node (scripts/shared_fs.sh: client caches off, direct-io-mode=enable)",
                "mount_found": found, "file_bytes": FILE_BYTES, "pool_files": pool, "warm_s": warm_s,
                "readers": args.readers, "files_per_reader": args.files, "repeats": args.repeats,
                "cpus": os.cpu_count(), "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "points": points}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tails_measured.json").write_text(json.dumps(settings) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command")
    sub = commands.add_parser("measure", help="measure per-reader file times on the GlusterFS volume, then report")
    sub.add_argument("--readers", type=int, nargs="+", default=[4, 8, 16], metavar="K")
    sub.add_argument("--files", type=int, default=250, help="distinct files each reader reads per point")
    sub.add_argument("--repeats", type=int, default=3)
    sub.add_argument("--out", type=Path, default=Path("results/reference/scale"))
    sub = commands.add_parser("report", help="write <out>/tails.txt (the default)")
    sub.add_argument("--out", type=Path, default=Path("results/reference/scale"))
    args = parser.parse_args()
    if args.command is None:
        args = parser.parse_args(["report", *sys.argv[1:]])
    if args.command == "measure":
        if min(args.readers) < 2 or args.files < 1 or args.repeats < 1:
            parser.error("--readers must be >= 2, --files and --repeats >= 1")
        measure(args)
    from hpcshuffle.studies.tails import write_report

    latency = [Path("results/reference/storage/latency.json"), args.out / "tails_cluster_latency.json"]
    text = write_report(args.out, latency, "python experiments/scale_tails.py report"
                        + (f" --out {args.out}" if str(args.out) != "results/reference/scale" else ""))
    print(text)


if __name__ == "__main__":
    main()
