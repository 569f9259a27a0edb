"""The peers on the namespace cluster's storage, one command for both:

- **streaming**: MosaicML Streaming beside hpcshuffle's GS, LS and PLS: per strategy the steady epoch time
  and the bytes read from /pfs per epoch (the storage link's counters), with the exactness audit
  (hpcshuffle/studies/peers.py) -> `--out`/streaming.{json,txt};
- **dlio**: DLIO's unet3d PyTorch workload (scaled) beside hpcshuffle's global, unordered global and local
  loaders on the files DLIO generated, with the same emulated compute: samples/s, AU and the bytes the
  storage node served (hpcshuffle/studies/dlio_peer.py) -> `--out`/dlio.{json,txt}.

    bash scripts/cluster.sh up --nodes 2 --storage-link 200mbit      # root; or use the one that is up
    make peers dlio                                                   # the peers' venvs
    python benchmarks/peers.py [--peers streaming dlio] [--repeats 3] [--epochs 3] [--nodes 2]
        [--samples 3000] [--strategies global local ... streaming-py1e-cached] [--dlio-runs dlio global ...]
        [--out results/reference/peers]

Each repeat runs every strategy once, in turn (so a slow spell of the machine falls on all of them);
finished runs under `--out`/runs (streaming) and `--out`/dlio-runs are reused, so an interrupted
benchmark continues. Run it while nothing else runs: the times carry whatever else shares the cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from hpcshuffle.studies.cluster import PFS, Cluster, connect, snapshot
from hpcshuffle.studies.cluster_runs import ensure_dataset
from hpcshuffle.studies.dlio_peer import (
    RUNS,
    DlioWorkload,
    dlio_dataset,
    dlio_table_text,
    run_dlio_once,
    summarize_dlio,
)
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
    parser.add_argument("--peers", nargs="+", default=["streaming", "dlio"], choices=["streaming", "dlio"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="the first is reported apart (start-up, "
                                                                 "Streaming's first downloads)")
    parser.add_argument("--samples", type=int, default=3000, help="streaming: the ImageFolder's images")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--strategies", nargs="+", default=list(ALL_STRATEGIES), choices=ALL_STRATEGIES,
                        help="streaming: the runs beside each other")
    parser.add_argument("--dlio-runs", nargs="+", default=list(RUNS), choices=RUNS, help="dlio: the runs beside each other")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "reference" / "peers")
    args = parser.parse_args()
    if args.epochs < 2:
        sys.exit("--epochs must be at least 2: the first epoch is reported apart from the steady ones")
    if args.out.resolve().is_relative_to("/tmp"):
        # the jobs write their runs there from the nodes, and every node has a /tmp of its own
        sys.exit(f"--out {args.out} is under /tmp, which each cluster node has of its own: put it where every node "
                 "sees it, e.g. under the checkout (the default, results/reference/peers)")
    with tempfile.TemporaryDirectory() as workdir:
        cluster = connect(snapshot(Path(workdir)), args.nodes)
        print(f"cluster: {cluster.settings}", flush=True)
        with LinkCounter(cluster.script) as link:
            if "streaming" in args.peers:
                streaming(cluster, link, args)
            if "dlio" in args.peers:
                dlio(cluster, link, args)


def streaming(cluster: Cluster, link: LinkCounter, args: argparse.Namespace) -> None:
    """Streaming's and hpcshuffle's strategies, `args.repeats` times in turn -> streaming.{json,txt}."""
    out = args.out.resolve()
    dataset = ensure_dataset(cluster, args.samples)
    mds, index, written = mds_of(cluster, dataset)
    work = Workload.sized(dataset, mds, index, args.nodes, args.epochs)
    print(f"MDS: {mds} ({written['shards']} shards, {written['image_bytes'] / 1e6:.0f} MB of images); "
          f"the cached variants keep {work.cache_bytes / 1e6:.0f} MB a node", flush=True)
    results = in_turn(args.repeats, args.strategies,
                      lambda strategy, repeat: run_once(cluster, link, work, strategy, out / "runs" / f"r{repeat}" / strategy))
    table = summarize(results, written["image_bytes"])
    text = table_text(table, written["image_bytes"])
    print("\n" + text, flush=True)
    (out / "streaming.txt").write_text(text + "\n")
    (out / "streaming.json").write_text(json.dumps({
        "command": command(), "made": now(),
        "cluster": cluster.settings, "dataset": str(PFS / dataset), "mds": str(mds), "mds_written": written,
        "nodes": args.nodes, "epochs": args.epochs, "cache_bytes": work.cache_bytes,
        "summary": table, "runs": results}, indent=1) + "\n")


def dlio(cluster: Cluster, link: LinkCounter, args: argparse.Namespace) -> None:
    """DLIO's workload and hpcshuffle's loaders on its files, `args.repeats` times in turn -> dlio.{json,txt}."""
    out = args.out.resolve()
    work = DlioWorkload(nodes=args.nodes, epochs=args.epochs)
    image_bytes = dlio_dataset(cluster, work, out / "dlio-runs" / "generate")
    print(f"DLIO's files: {PFS / work.folder} ({image_bytes / 1e6:.0f} MB of training files)", flush=True)
    results = in_turn(args.repeats, args.dlio_runs,
                      lambda run, repeat: run_dlio_once(cluster, link, work, run, out / "dlio-runs" / f"r{repeat}" / run))
    table = summarize_dlio(results, work, image_bytes)
    text = dlio_table_text(table, work, image_bytes)
    print("\n" + text, flush=True)
    (out / "dlio.txt").write_text(text + "\n")
    (out / "dlio.json").write_text(json.dumps({
        "command": command(), "made": now(), "cluster": cluster.settings, "dataset": str(PFS / work.folder),
        "image_bytes": image_bytes, "workload": asdict(work), "dlio_overrides": work.dlio_overrides(PFS / work.folder),
        "summary": table, "runs": results}, indent=1) + "\n")


def in_turn(repeats: int, names: list[str], run_one: Callable[[str, int], dict]) -> list[dict]:
    """`run_one(name, repeat)` for every name, in turn, `repeats` times (so a slow spell of the machine falls
    on all of them), each result reported as it comes."""
    results = []
    for repeat in range(repeats):
        for name in names:
            results.append(run_one(name, repeat))
            report(len(results), repeats * len(names), results[-1])
    return results


def report(done: int, total: int, result: dict) -> None:
    """One finished run's line: its epochs' times and bytes from /pfs, and its audit."""
    times = ", ".join(f"{epoch['epoch_s']:.1f}" for epoch in result["epochs"])
    shared = ", ".join(f"{epoch['shared_bytes'] / 1e6:.0f}" for epoch in result["epochs"])
    audit = "; ".join(result["audit_problems"]) or "ok"
    print(f"[{done}/{total}] {result['strategy']}: epochs {times} s, from /pfs {shared} MB (before the first: "
          f"{result['before_first_epoch_bytes'] / 1e6:.0f}); audit {audit}", flush=True)


def command() -> str:
    return "python benchmarks/peers.py " + " ".join(sys.argv[1:])


def now() -> str:
    return f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


if __name__ == "__main__":
    main()
