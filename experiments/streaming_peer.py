"""MosaicML Streaming, the peer hpcshuffle is measured beside: a dataset written as Streaming's MDS shards,
and the order Streaming's `StreamingDataset` gives each rank, audited for exactness (every sample once
an epoch, over all ranks). Runs in the peers' own venv (`make peers`: .venv-peers, docs/peers.md), never
in the project's: Streaming 0.13 pins numpy < 2.2 and imports transformers.

    .venv-peers/bin/python experiments/streaming_peer.py write --root DATASET --out MDS [--shard-bytes 1048576]
    .venv-peers/bin/python experiments/streaming_peer.py order --remote MDS --local DIR [--ranks 2] [--epochs 2]
        [--shuffle-algo py1e] [--cache-limit BYTES] [--batch 32] [--seed 0]

`write` reads an ImageFolder dataset's training split (hpcshuffle's own listing, so sample ids are the
ones hpcshuffle uses) and writes one MDS record per image: its id, its label and the file's bytes,
undecoded, as hpcshuffle's stores keep them. `order` runs `--ranks` ranks of one node (Streaming's
LOCAL_WORLD_SIZE; torch.distributed over loopback, which Streaming needs at start), each iterating
`--epochs` epochs of a `StreamingDataset` with `remote` MDS copied into `local`, and prints one JSON
object: per epoch, the ids each rank got, how many samples no rank got and how many came twice.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

# hpcshuffle from ./.venv: .venv-peers adds that venv's site directory after its own
from hpcshuffle.analysis.audit import epoch_exactness

COLUMNS = {"id": "int", "label": "int", "image": "bytes"}
RANK_WAIT_S = 900  # for every rank of `order` to finish its epochs


def write(root: Path, out: Path, shard_bytes: int) -> dict:
    """The training split of the ImageFolder `root` as MDS shards in `out` (which must not exist)."""
    from streaming import MDSWriter

    from hpcshuffle.formats import get_format

    if out.exists():
        raise SystemExit(f"{out} exists: Streaming would mix its shards with the old ones; remove it or pick another --out")
    catalog = get_format("imagefolder").scan(root, "train")
    started, nbytes = time.perf_counter(), 0
    with MDSWriter(out=str(out), columns=COLUMNS, size_limit=shard_bytes) as writer:
        for sample_id in range(len(catalog)):
            image = catalog.path(sample_id).read_bytes()
            nbytes += len(image)
            writer.write({"id": sample_id, "label": catalog.labels[sample_id], "image": image})
    shards = sorted(out.glob("shard.*.mds"))
    return {"samples": len(catalog), "image_bytes": nbytes, "shards": len(shards),
            "shard_bytes": sum(shard.stat().st_size for shard in shards), "seconds": time.perf_counter() - started}


def rank_order(remote: str, local: str, epochs: int, shuffle_algo: str, cache_limit: int | None, batch: int,
               seed: int) -> None:
    """One rank (its place from the environment, as Streaming reads it): print a JSON line per epoch."""
    from streaming import StreamingDataset

    dataset = StreamingDataset(remote=remote, local=local, shuffle=True, shuffle_algo=shuffle_algo,
                               shuffle_seed=seed, batch_size=batch, cache_limit=cache_limit)
    for epoch in range(epochs):
        started = time.perf_counter()
        ids = [int(sample["id"]) for sample in dataset]
        print(json.dumps({"rank": int(os.environ["RANK"]), "epoch": epoch, "ids": ids,
                          "seconds": time.perf_counter() - started}), flush=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def order(args: argparse.Namespace) -> dict:
    """`--ranks` ranks of one node, each a process; their epochs gathered and audited."""
    samples = json.loads((Path(args.remote) / "index.json").read_text())
    num_samples = sum(shard["samples"] for shard in samples["shards"])
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(args.ranks), "LOCAL_WORLD_SIZE": str(args.ranks)}
    command = [sys.executable, __file__, "_rank", f"--remote={args.remote}", f"--local={args.local}",
               f"--epochs={args.epochs}", f"--shuffle-algo={args.shuffle_algo}", f"--batch={args.batch}",
               f"--seed={args.seed}", *([f"--cache-limit={args.cache_limit}"] if args.cache_limit else [])]
    ranks = [subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(args.ranks)]
    rows, failures = [], []
    for rank, process in enumerate(ranks):
        try:
            out, err = process.communicate(timeout=RANK_WAIT_S)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise SystemExit(f"Streaming rank {rank} did not finish {args.epochs} epochs within {RANK_WAIT_S} s") from None
        if process.returncode:
            failures.append(f"rank {rank} exited {process.returncode}:\n{err[-2000:]}")
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if failures:
        raise SystemExit("Streaming's ranks failed: " + "\n".join(failures))
    epochs = []
    for epoch in range(args.epochs):
        per_rank = sorted((row for row in rows if row["epoch"] == epoch), key=lambda row: row["rank"])
        lost, repeated = epoch_exactness((i for row in per_rank for i in row["ids"]), num_samples)
        epochs.append({"epoch": epoch, "lost": lost, "repeated": repeated,
                       "per_rank": [len(row["ids"]) for row in per_rank],
                       "seconds": max(row["seconds"] for row in per_rank), "ids": [row["ids"] for row in per_rank]})
    return {"samples": num_samples, "ranks": args.ranks, "shuffle_algo": args.shuffle_algo,
            "cache_limit": args.cache_limit, "epochs": epochs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    writing = commands.add_parser("write", help="an ImageFolder's training split as MDS shards")
    writing.add_argument("--root", type=Path, required=True)
    writing.add_argument("--out", type=Path, required=True)
    writing.add_argument("--shard-bytes", type=int, default=1 << 20)
    for name in ("order", "_rank"):
        reading = commands.add_parser(name, help="Streaming's order on one node's ranks, audited"
                                      if name == "order" else argparse.SUPPRESS)
        reading.add_argument("--remote", required=True)
        reading.add_argument("--local", required=True)
        reading.add_argument("--epochs", type=int, default=2)
        reading.add_argument("--shuffle-algo", default="py1e", choices=["py1e", "py1br", "py1b", "py1s", "py2s", "naive"])
        reading.add_argument("--cache-limit", type=int, default=None, help="bytes of shards kept in --local")
        reading.add_argument("--batch", type=int, default=32)
        reading.add_argument("--seed", type=int, default=0)
        if name == "order":
            reading.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    if args.command == "write":
        print(json.dumps(write(args.root, args.out, args.shard_bytes)))
    elif args.command == "_rank":
        rank_order(args.remote, args.local, args.epochs, args.shuffle_algo, args.cache_limit, args.batch, args.seed)
    else:
        print(json.dumps(order(args)))


if __name__ == "__main__":
    main()
