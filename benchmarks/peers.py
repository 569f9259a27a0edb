"""MosaicML Streaming beside hpcshuffle's GS, LS and PLS on the namespace cluster: per strategy the
steady epoch time and the bytes read from /pfs per epoch (the storage link's counters), with the
exactness audit, repeated (median and range). hpcshuffle/studies/peers.py holds the pieces.

    bash scripts/cluster.sh up --nodes 2 --storage-link 200mbit      # root; or use the one that is up
    make peers                                                        # Streaming's venv
    python benchmarks/peers.py [--repeats 3] [--epochs 3] [--samples 3000] [--nodes 2]
        [--strategies global local ... streaming-py1e-cached] [--out results/reference/peers]

Each repeat runs every strategy once, in turn (so a slow spell of the machine falls on all of them);
finished runs under `--out`/runs are reused, so an interrupted benchmark continues. Writes
`--out`/streaming.json (every run, and the summary) and `--out`/streaming.txt (the table). Run it
while nothing else runs: the times carry whatever else shares the cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hpcshuffle.studies.cluster import PFS, connect, snapshot
from hpcshuffle.studies.cluster_runs import ensure_dataset
from hpcshuffle.studies.peers import (
    ALL_STRATEGIES,
    LinkCounter,
    Workload,
    mds_of,
    run_once,
    summarize,
    table_text,
)
from hpcshuffle.studies.runs import REPO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="the first is reported apart (start-up, "
                                                                 "Streaming's first downloads)")
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--strategies", nargs="+", default=list(ALL_STRATEGIES), choices=ALL_STRATEGIES)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "reference" / "peers")
    args = parser.parse_args()
    if args.epochs < 2:
        sys.exit("--epochs must be at least 2: the first epoch is reported apart from the steady ones")
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as workdir:
        cluster = connect(snapshot(Path(workdir)), args.nodes)
        print(f"cluster: {cluster.settings}", flush=True)
        dataset = ensure_dataset(cluster, args.samples)
        mds, index, written = mds_of(cluster, dataset)
        work = Workload.sized(dataset, mds, index, args.nodes, args.epochs)
        print(f"MDS: {mds} ({written['shards']} shards, {written['image_bytes'] / 1e6:.0f} MB of images); "
              f"the cached variants keep {work.cache_bytes / 1e6:.0f} MB a node", flush=True)
        results = []
        with LinkCounter(cluster.script) as link:
            for repeat in range(args.repeats):
                for strategy in args.strategies:
                    result = run_once(cluster, link, work, strategy, out / "runs" / f"r{repeat}" / strategy)
                    results.append(result)
                    times = ", ".join(f"{epoch['epoch_s']:.1f}" for epoch in result["epochs"])
                    shared = ", ".join(f"{epoch['shared_bytes'] / 1e6:.0f}" for epoch in result["epochs"])
                    audit = "; ".join(result["audit_problems"]) or "ok"
                    print(f"[{len(results)}/{args.repeats * len(args.strategies)}] {strategy}: epochs {times} s, "
                          f"from /pfs {shared} MB (before the first: "
                          f"{result['before_first_epoch_bytes'] / 1e6:.0f}); audit {audit}", flush=True)
        table = summarize(results, written["image_bytes"])
        text = table_text(table, written["image_bytes"])
        print("\n" + text, flush=True)
        (out / "streaming.txt").write_text(text + "\n")
        (out / "streaming.json").write_text(json.dumps({
            "command": "python benchmarks/peers.py " + " ".join(sys.argv[1:]),
            "made": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
            "cluster": cluster.settings, "dataset": str(PFS / dataset), "mds": str(mds), "mds_written": written,
            "nodes": args.nodes, "epochs": args.epochs, "cache_bytes": work.cache_bytes,
            "summary": table, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
