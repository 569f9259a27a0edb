"""MosaicML Streaming, the peer hpcshuffle is measured beside: a dataset written as Streaming's MDS shards,
and Streaming's `StreamingDataset` feeding ranks, either only listing the ids each rank gets or training
hpcshuffle's model on them, audited for exactness (every sample once an epoch, over all ranks). Runs in
the peers' own venv (`make peers`: .venv-peers, docs/peers.md), never in the project's: Streaming 0.13
pins numpy < 2.2 and imports transformers.

    .venv-peers/bin/python experiments/streaming_peer.py write --root DATASET --out MDS [--shard-bytes 1048576]
    .venv-peers/bin/python experiments/streaming_peer.py run --remote MDS --local DIR --out RUN [--ranks 2]
        [--epochs 2] [--shuffle-algo py1e] [--cache-limit BYTES [--predownload SAMPLES]] [--batch 32]
        [--seed 0] [--model small_cnn --image-size 32]

`write` reads an ImageFolder dataset's training split (hpcshuffle's own listing, so sample ids are the
ones hpcshuffle uses) and writes one MDS record per image: its id, its label and the file's bytes,
undecoded, as hpcshuffle's stores keep them. `run` starts `--ranks` ranks of one node (Streaming's
LOCAL_WORLD_SIZE; torch.distributed over loopback, which Streaming needs at start). Each iterates
`--epochs` epochs of a `StreamingDataset` with `remote` MDS copied into `local` and writes a JSON line
per epoch to RUN/rank<r>.jsonl: the ids it got, and with `--model` the seconds it spent waiting for
batches (io: reading, decoding as hpcshuffle's loader decodes), in FW+BW and in the gradient allreduce
(hpcshuffle's own). `run` then prints `summary(RUN)`: per epoch the slowest rank's times, how many
samples no rank got (`lost`) and how many came twice (`repeated`). A Slurm job runs `_rank` under srun
with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, then `summary`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

# hpcshuffle from ./.venv: .venv-peers adds that venv's site directory after its own
from hpcshuffle.analysis.audit import epoch_exactness
from hpcshuffle.files import append_jsonl, read_jsonl

COLUMNS = {"id": "int", "label": "int", "image": "bytes"}
RANK_WAIT_S = 1800  # for every rank of `run` to finish its epochs
SHUFFLE_ALGOS = ["py1e", "py1br", "py1b", "py1s", "py2s", "naive"]


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
    return {"samples": len(catalog), "classes": len(catalog.classes), "image_bytes": nbytes, "shards": len(shards),
            "shard_bytes": sum(shard.stat().st_size for shard in shards), "seconds": time.perf_counter() - started}


class Trainer:
    """hpcshuffle's model, codec and gradient allreduce on Streaming's samples: one step per batch."""

    def __init__(self, model_name: str, classes: int, image_size: int, world_size: int) -> None:
        import torch

        from hpcshuffle.formats.codec import DatasetOptions
        from hpcshuffle.formats.imagefolder import ImageFolderCodec
        from hpcshuffle.models import build

        torch.set_num_threads(1)  # as jobs/train.sbatch's ranks: --cpus-per-task 1
        self.torch, self.world_size = torch, world_size
        self.codec = ImageFolderCodec(classes, DatasetOptions("flip", image_size))
        self.model, self.loss_fn = build(model_name, num_classes=classes), torch.nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def decode(self, samples: list[dict]):
        """A batch of Streaming's records as (images, labels), decoded and augmented as hpcshuffle does."""
        pairs = [self.codec.decode(sample["image"], int(sample["label"]), True) for sample in samples]
        return self.torch.stack([image for image, _ in pairs]), self.torch.tensor([label for _, label in pairs])

    def step(self, images, labels) -> tuple[float, float]:
        """One SGD step: (seconds of FW+BW, seconds of the allreduce and the update)."""
        from hpcshuffle.training.learner import average_gradients

        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_fn(self.model(images), labels).backward()
        computed = time.perf_counter()
        average_gradients(self.model, self.world_size)
        self.optimizer.step()
        return computed - started, time.perf_counter() - computed


def train_on(trainer: Trainer, batch: list[dict], waiting: float, times: dict[str, float]) -> float:
    """Decode and train on `batch`, the loop having waited for it since `waiting`; add the seconds to
    `times`; the clock at the step's end, when the wait for the next batch starts."""
    images, labels = trainer.decode(batch)
    times["io"] += time.perf_counter() - waiting
    fwbw, allreduce = trainer.step(images, labels)
    times["fwbw"], times["allreduce"] = times["fwbw"] + fwbw, times["allreduce"] + allreduce
    return time.perf_counter()


def read_ahead_bytes(remote: str, ranks_per_node: int, predownload: int) -> int:
    """The most shard bytes a node's ranks may need at once for samples they have not yet yielded: each
    rank's download thread runs up to `predownload` samples ahead, and under a shuffle each of them can
    be in a shard of its own (at most every shard), each as large as the largest."""
    shards = json.loads((Path(remote) / "index.json").read_text())["shards"]
    return ranks_per_node * min(predownload, len(shards)) * max(shard["raw_data"]["bytes"] for shard in shards)


def check_cache_limit(args: argparse.Namespace, ranks_per_node: int) -> None:
    """Refuse a cache limit below `read_ahead_bytes`: Streaming then evicts shards its ranks have
    downloaded ahead, and a rank can wait forever for one (mosaicml/streaming#417; here 3 of 6 runs of
    2 ranks hung with a cache of 5 shards)."""
    needed = read_ahead_bytes(args.remote, ranks_per_node, args.predownload or 8 * args.batch)
    if args.cache_limit is not None and args.cache_limit < needed:
        raise SystemExit(f"--cache-limit {args.cache_limit} is below the {needed} bytes of shards this node's "
                         f"{ranks_per_node} rank(s) may read ahead (predownload "
                         f"{args.predownload or 8 * args.batch} samples each, one shard each at worst); Streaming "
                         "can then wait forever for a shard it evicted. Raise --cache-limit, or lower --predownload")


def rank_run(args: argparse.Namespace) -> None:
    """One rank, its place from the environment: `--epochs` epochs of Streaming's order, a JSON line each
    into `--out`/rank<r>.jsonl."""
    import torch.distributed as dist
    from streaming import StreamingDataset

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    check_cache_limit(args, int(os.environ["LOCAL_WORLD_SIZE"]))
    # Streaming copies a shard from a local-path remote with shutil.copy, which on Linux uses sendfile:
    # on the cluster's GlusterFS mount (direct-io-mode) sendfile still fills the node's page cache, so a
    # later copy of the same shard (a rerun, or a refetch after an eviction) never reached the storage
    # node (measured: 0.97 MB over the storage link for the first copy of a shard, 0 for the second, 0.97
    # for `cat`). Plain read/write copies read the way every other reader of /pfs does here.
    shutil._USE_CP_SENDFILE = False
    if world_size > 1:
        dist.init_process_group("gloo")  # env://; Streaming then uses this group instead of making its own
    dataset = StreamingDataset(remote=args.remote, local=args.local, shuffle=True, shuffle_algo=args.shuffle_algo,
                               shuffle_seed=args.seed, batch_size=args.batch, cache_limit=args.cache_limit,
                               predownload=args.predownload)
    trainer = Trainer(args.model, args.classes, args.image_size, world_size) if args.model else None
    out = Path(args.out) / f"rank{rank:05d}.jsonl"
    for epoch in range(args.epochs):
        ids, times = [], {"io": 0.0, "fwbw": 0.0, "allreduce": 0.0}
        started = waiting = time.perf_counter()
        started_at = time.time()  # wall clock: the epoch's window for the storage link's counters
        batch: list[dict] = []
        for sample in dataset:
            ids.append(int(sample["id"]))
            batch.append(sample)
            if trainer is not None and len(batch) == args.batch:
                waiting = train_on(trainer, batch, waiting, times)
                batch = []
        if trainer is not None and batch:  # the epoch's last, short batch
            train_on(trainer, batch, waiting, times)
        append_jsonl(out, {"rank": rank, "epoch": epoch, "ids": ids, "epoch_s": time.perf_counter() - started,
                           "started_at": started_at, "ended_at": time.time(),
                           **({f"{phase}_s": s for phase, s in times.items()} if trainer else {})})
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


def summary(out: Path, remote: str) -> dict:
    """Per epoch of the run in `out`: the slowest rank's times, each rank's sample count, the audit, and the
    epoch's wall-clock window (`wall`: the first rank's start, the last rank's end; Unix seconds)."""
    index = json.loads((Path(remote) / "index.json").read_text())
    num_samples = sum(shard["samples"] for shard in index["shards"])
    rows = [row for path in sorted(out.glob("rank*.jsonl")) for row in read_jsonl(path)]
    epochs = []
    for epoch in sorted({row["epoch"] for row in rows}):
        per_rank = sorted((row for row in rows if row["epoch"] == epoch), key=lambda row: row["rank"])
        lost, repeated = epoch_exactness((i for row in per_rank for i in row["ids"]), num_samples)
        times = {key: max(row[key] for row in per_rank) for key in per_rank[0] if key.endswith("_s")}
        epochs.append({"epoch": epoch, "ranks": len(per_rank), "lost": lost, "repeated": repeated,
                       "per_rank": [len(row["ids"]) for row in per_rank], **times,
                       "wall": {"start": min(row["started_at"] for row in per_rank),
                                "end": max(row["ended_at"] for row in per_rank)}})
    return {"samples": num_samples, "epochs": epochs}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(args: argparse.Namespace) -> dict:
    """`--ranks` ranks of one node, each a process, then `summary` of what they wrote."""
    check_cache_limit(args, args.ranks)
    out = Path(args.out)
    if list(out.glob("rank*.jsonl")):
        raise SystemExit(f"{out} holds an earlier run's rank files; remove them or pick another --out")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(args.ranks), "LOCAL_WORLD_SIZE": str(args.ranks)}
    command = [sys.executable, __file__, "_rank", *rank_options(args)]
    ranks = [subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stderr=subprocess.PIPE,
                              text=True) for r in range(args.ranks)]
    failures = []
    for rank, process in enumerate(ranks):
        try:
            _, err = process.communicate(timeout=RANK_WAIT_S)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise SystemExit(f"Streaming rank {rank} did not finish {args.epochs} epochs within {RANK_WAIT_S} s") from None
        if process.returncode:
            failures.append(f"rank {rank} exited {process.returncode}:\n{err[-2000:]}")
    if failures:
        raise SystemExit("Streaming's ranks failed: " + "\n".join(failures))
    return {"ranks": args.ranks, "shuffle_algo": args.shuffle_algo, "cache_limit": args.cache_limit,
            **summary(out, args.remote)}


def rank_options(args: argparse.Namespace) -> list[str]:
    """`args` as `_rank`'s command line."""
    options = [f"--remote={args.remote}", f"--local={args.local}", f"--out={args.out}", f"--epochs={args.epochs}",
               f"--shuffle-algo={args.shuffle_algo}", f"--batch={args.batch}", f"--seed={args.seed}",
               f"--classes={args.classes}", f"--image-size={args.image_size}"]
    options += [f"--{name.replace('_', '-')}={value}" for name in ("cache_limit", "predownload")
                if (value := getattr(args, name)) is not None]
    return options + (
        [f"--model={args.model}"] if args.model else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    writing = commands.add_parser("write", help="an ImageFolder's training split as MDS shards")
    writing.add_argument("--root", type=Path, required=True)
    writing.add_argument("--out", type=Path, required=True)
    writing.add_argument("--shard-bytes", type=int, default=1 << 20)
    summing = commands.add_parser("summary", help="the audit and times of a run's rank files")
    summing.add_argument("--out", type=Path, required=True)
    summing.add_argument("--remote", required=True)
    for name in ("run", "_rank"):
        reading = commands.add_parser(name, help="Streaming feeding one node's ranks, audited"
                                      if name == "run" else argparse.SUPPRESS)
        reading.add_argument("--remote", required=True, help="the MDS directory (write's --out)")
        reading.add_argument("--local", required=True, help="the node's cache of shards")
        reading.add_argument("--out", required=True, help="where each rank writes its epochs")
        reading.add_argument("--epochs", type=int, default=2)
        reading.add_argument("--shuffle-algo", default="py1e", choices=SHUFFLE_ALGOS)
        reading.add_argument("--cache-limit", type=int, default=None, help="bytes of shards kept in --local")
        reading.add_argument("--predownload", type=int, default=None,
                             help="samples each rank downloads ahead (Streaming's default: 8 batches)")
        reading.add_argument("--batch", type=int, default=32)
        reading.add_argument("--seed", type=int, default=0)
        reading.add_argument("--model", default=None, help="train this hpcshuffle model (e.g. small_cnn); "
                                                            "without it, only the ids are listed")
        reading.add_argument("--classes", type=int, default=10)
        reading.add_argument("--image-size", type=int, default=32)
        if name == "run":
            reading.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    if args.command == "write":
        print(json.dumps(write(args.root, args.out, args.shard_bytes)))
    elif args.command == "summary":
        print(json.dumps(summary(args.out, args.remote)))
    elif args.command == "_rank":
        rank_run(args)
    else:
        print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
