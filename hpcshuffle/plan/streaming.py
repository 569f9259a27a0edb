"""MosaicML Streaming's sample orders as plans: the ids a `StreamingDataset` gives each worker, each epoch,
under its `py1e` and `py1br` shuffles (mosaicml-streaming 0.13).

Streaming orders an epoch with two functions that its default batching (`batching/random.py`) composes:
`get_partitions` cuts the epoch's positions into one run per node, rank and dataloader worker, and
`get_shuffle` maps every position to a sample id, so that each shard lands in one canonical node's
positions (or two, where it straddles their boundary). The orders here come from those two functions of
the installed package, not from a copy of them. The package pins numpy < 2.2 and imports transformers,
so it lives in the peers' venv (`make peers`: .venv-peers): the first plan a process asks for starts a
helper there (`serve`), which then answers every epoch's request for as long as the process lives.
Starting it costs Streaming's import (~6 s here) and the helper holds ~0.8 GB (torch and transformers);
an epoch's order then takes milliseconds.

How a plan's run maps onto Streaming's:

- Each of the M workers is one of Streaming's physical nodes, with one rank and one dataloader worker.
  With one worker per rank the batch size only pads the end of a rank's run with -1, which Streaming
  skips, so the orders are asked with a batch of 1.
- The dataset is one stream of shards of G consecutive ids (`PlanSpec.shard_samples`: shuffle.block,
  or a packed dataset's shards), the last one shorter. Every sample is chosen once an epoch, so
  Streaming's resampling maps each id to itself.
- Canonical nodes: Streaming's default for py1e and py1br is the physical node count
  (`StreamingDataset._resume`; only py1s and py2s default to 64 × the nodes), so with a node per worker
  it is the worker count M: the default and the worker count agree. Partitioning: its default,
  `relaxed`, which on a run's first start is `orig`.
- Shuffle block: `PlanSpec.shuffle_buffer` samples (shuffle.buffer); 0 takes Streaming's default from
  `StreamingDataset` itself (max(4,000,000 // canonical nodes, 2^18) in 0.13).
- Streaming's shuffle seed is the plan's seed, and its epochs count from 0 as the plan's do.

What that gives: worker i reads canonical node i's span of the shards, whose order is drawn once per
run, so a worker's samples are the same every epoch and only their order changes (py1e moves each
shard's samples at random within about one shuffle block around the shard; py1br shuffles runs of
about one shuffle block). Hence q = 0 in the strategy table. A worker whose share is ⌊N/M⌋ trains its
last sample twice, back to back, so every worker trains ⌈N/M⌉. tests/e2e/test_streaming_orders.py
checks these plans against a real StreamingDataset on M simulated nodes, id by id.

The plans read every sample from shared storage (`held` empty, `reads_shared` ⌈N/M⌉), which is what
hpcshuffle's shared data path reads when it trains on them. What Streaming would read, keeping whole
shards on each node's disk, is `shard_cache_reads`.

This is the one planner that leaves its process (DESIGN.md: plans are pure, no I/O). Its output is still
a function of the spec and the epoch alone, but it needs the peers' venv.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from hpcshuffle.errors import ConfigError
from hpcshuffle.plan.common import EpochPlan, PlanSpec, from_shared

PEERS_PYTHON = Path(__file__).resolve().parents[2] / ".venv-peers" / "bin" / "python"
SERVE = "from hpcshuffle.plan.streaming import serve; serve()"

# the helper of each process that asked for an order, by process id: a forked child starts its own
# instead of sharing its parent's pipes
_helpers: dict[int, subprocess.Popen] = {}
_asking = threading.Lock()  # one request and its reply at a time on a helper's pipes


def plan_streaming_py1e(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Streaming's py1e order of `epoch` for each worker (`held` is ignored and reported empty)."""
    del held
    return streaming_plan("py1e", spec, epoch)


def plan_streaming_py1br(spec: PlanSpec, held: list[np.ndarray], epoch: int) -> EpochPlan:
    """Streaming's py1br order of `epoch` for each worker (`held` is ignored and reported empty)."""
    del held
    return streaming_plan("py1br", spec, epoch)


def streaming_plan(algo: str, spec: PlanSpec, epoch: int) -> EpochPlan:
    """The plan in which worker r trains on the ids Streaming's `algo` gives node r in `epoch`."""
    orders = worker_orders(algo, spec, epoch)
    if orders.shape != (spec.num_ranks, spec.max_share):
        raise RuntimeError(f"Streaming's {algo} gave orders of shape {orders.shape} for {spec.num_samples} samples "
                           f"on {spec.num_ranks} nodes, not ⌈N/M⌉ = {spec.max_share} ids per node: this module "
                           "assumes mosaicml-streaming 0.13's partitioning; check the peers' venv (`make peers`)")
    return from_shared(spec, epoch, orders)


def worker_orders(algo: str, spec: PlanSpec, epoch: int) -> np.ndarray:
    """int64 (M, ⌈N/M⌉): per worker, the ids Streaming's `algo` gives it in `epoch`, asked of this
    process's helper in the peers' venv (started on first use)."""
    request = {"algo": algo, "samples": spec.num_samples, "shard": spec.shard_samples, "nodes": spec.num_ranks,
               "seed": spec.seed, "block": spec.shuffle_buffer, "epoch": epoch}
    with _asking:
        helper = _helper()
        orders = _ask(helper, request)
    if orders is None:
        raise RuntimeError(f"Streaming's order helper ({PEERS_PYTHON}) exited with code {helper.wait()} before "
                           f"answering {request}; its error is printed above. If it is an import error, "
                           "`make peers` rebuilds the peers' venv")
    return orders


def _ask(helper: subprocess.Popen, request: dict) -> np.ndarray | None:
    """The orders `helper` answers `request` with (`serve`); None where it ends before it has answered."""
    try:
        helper.stdin.write(json.dumps(request).encode() + b"\n")
        helper.stdin.flush()
    except BrokenPipeError:
        return None
    header = helper.stdout.readline()
    if not header:
        return None
    shape = json.loads(header)
    data = helper.stdout.read(8 * math.prod(shape))
    if len(data) < 8 * math.prod(shape):
        return None
    return np.frombuffer(data, dtype="<i8").reshape(shape).astype(np.int64)


def _helper() -> subprocess.Popen:
    """This process's helper, started in the peers' venv where there is none or it has exited."""
    helper = _helpers.get(os.getpid())
    if helper is None or helper.poll() is not None:
        if not PEERS_PYTHON.exists():
            raise ConfigError(f"shuffle=streaming_* takes its orders from MosaicML Streaming, which runs in the "
                              f"peers' venv, but {PEERS_PYTHON} is missing: `make peers` makes it")
        helper = _helpers[os.getpid()] = subprocess.Popen([str(PEERS_PYTHON), "-c", SERVE], stdin=subprocess.PIPE,
                                                          stdout=subprocess.PIPE)
    return helper


def serve() -> None:
    """The helper, in the peers' venv: read requests (`worker_orders`' JSON, one a line) from stdin until
    it closes, and answer each on stdout with the orders' shape [M, S] as a JSON line followed by their
    M·S little-endian int64. Streaming's errors end it, their traceback on stderr."""
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever Streaming prints must not land among the replies
    for line in sys.stdin:
        orders = streaming_orders(**json.loads(line))
        replies.write(json.dumps(orders.shape).encode() + b"\n" + orders.astype("<i8").tobytes())
        replies.flush()


def streaming_orders(algo: str, samples: int, shard: int, nodes: int, seed: int, block: int, epoch: int) -> np.ndarray:
    """int64 (nodes, ⌈samples/nodes⌉): the ids Streaming's `algo` gives each of `nodes` nodes (one rank and
    one worker each) in `epoch`, over shards of `shard` consecutive ids, with a shuffle block of `block`
    samples (0: Streaming's default). Runs in the peers' venv: Streaming's `get_partitions` and
    `get_shuffle`, composed as its `random` batching composes them."""
    from streaming import StreamingDataset
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    if not block:  # Streaming's default, as StreamingDataset sets it from the canonical nodes
        defaults = SimpleNamespace(shuffle_block_size=None, num_canonical_nodes=nodes)
        StreamingDataset._set_shuffle_block_size(defaults, SimpleNamespace(worker_of_rank=1))  # 1: do not log it
        block = defaults.shuffle_block_size
    shard_sizes = np.bincount(np.arange(samples) // shard)
    # canonical nodes = physical nodes (Streaming's default for py1e and py1br); one rank, one worker, batch 1
    positions = get_partitions("relaxed", samples, nodes, nodes, 1, 1, 1).reshape(nodes, -1)
    return get_shuffle(algo, shard_sizes, nodes, seed, epoch, block)[positions]


def shard_cache_reads(plans: Sequence[EpochPlan]) -> np.ndarray:
    """int64 (epochs, M): the samples each worker reads from shared storage in each epoch of `plans`,
    read as a Streaming node reads them: a whole shard (`PlanSpec.shard_samples` consecutive ids, the
    last shard shorter) the first time one of its samples is due, then kept on the node's disk.

    Assumes what a StreamingDataset with no cache limit (`cache_limit=None`) on empty local directories
    does: each worker is a node with a disk of its own that holds nothing before epoch 0 and never evicts,
    so an epoch reads the shards its order touches that no earlier epoch touched (a shard split between
    two nodes' spans is read by both). Read-ahead (`predownload`) changes when a shard is read, not
    whether. `plans` must be consecutive epochs from 0, the history of one run.
    """
    if not plans or [plan.epoch for plan in plans] != list(range(len(plans))):
        raise ValueError(f"shard_cache_reads needs a run's plans of epochs 0, 1, 2, ... in order, got epochs "
                         f"{[plan.epoch for plan in plans]}: a node's disk holds what every earlier epoch read")
    spec = plans[0].spec
    shard_sizes = np.bincount(np.arange(spec.num_samples) // spec.shard_samples)
    held = np.zeros((spec.num_ranks, len(shard_sizes)), dtype=bool)
    reads = np.zeros((len(plans), spec.num_ranks), dtype=np.int64)
    for plan in plans:
        for worker, order in enumerate(plan.order):
            due = np.unique(order // spec.shard_samples)
            reads[plan.epoch, worker] = shard_sizes[due[~held[worker, due]]].sum()
            held[worker, due] = True
    return reads
