"""A simulated cluster: `Platform` and its sections (network, node-local store, shared storage, loader,
allreduce, exchange), each a dataclass whose docstring documents its keys and whose `__post_init__`
checks its values' ranges.

Every number of a platform is a plain SI value (bytes, bytes/s, seconds), finite and >= 0; the
shipped files (`conf/platform/<name>.yaml`, read into these classes as OmegaConf structured configs
by scale/platform_yaml.py) say where each one comes from. The sections are not frozen (OmegaConf
merges a file into them); `Platform`, built from them, is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import numpy as np

from hpcshuffle.errors import at_least, positive

TOPOLOGIES = ("fat_tree", "star")
SCHEDULERS = ("hpcshuffle", "kakurenbo")


class PlatformError(ValueError):
    """A platform file that cannot be simulated; the message names the file, the key and the fix."""


def check_numbers(section: Any, capacities: tuple[str, ...] = (),
                  largest: dict[str, tuple[float, str]] | None = None) -> None:
    """Every number of `section` finite and >= 0; each of `capacities` > 0 (the simulation divides by
    it or waits on it: 0 would divide by zero or deadlock SimGrid); each of `largest` at most its
    (bound, reason). Errors start with the field's name: the loader puts the key's section before it."""
    largest = largest or {}
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            raise PlatformError(f"{f.name} must be a finite number, got {value!r}")
        at_least(f.name, value, 0, error=PlatformError)
        if f.name in capacities:
            positive(f.name, value, "(a capacity of 0 never finishes)", error=PlatformError)
        if f.name in largest and value > largest[f.name][0]:
            raise PlatformError(f"{f.name} must be <= {largest[f.name][0]} ({largest[f.name][1]}), got {value}")


@dataclass
class Network:
    """How nodes reach each other (and the shared file system's servers).

    topology: "fat_tree" (SimGrid's fat-tree cluster zone) or "star" (every node on one switch).
    fat_tree: SimGrid's fat-tree description "levels;down;up;link_counts", leaves (nodes) first,
        e.g. "2;32,16;1,16;2,1": 32 nodes per leaf switch with 2 links each, 16 leaf switches.
    link_bandwidth / link_latency: one link of the fabric (bytes/s, s).
    intra_node_bandwidth / intra_node_latency: between two ranks of one node (NVLink, shared memory).
    """

    topology: str
    link_bandwidth: float
    link_latency: float
    intra_node_bandwidth: float
    intra_node_latency: float
    fat_tree: str = ""

    def __post_init__(self) -> None:
        check_numbers(self, capacities=("link_bandwidth", "intra_node_bandwidth"))
        if self.topology not in TOPOLOGIES:
            raise PlatformError(f"topology {self.topology!r} is not one of {list(TOPOLOGIES)}")
        if self.topology == "fat_tree":
            check_fat_tree(self.fat_tree)

    def leaves(self) -> int:
        """How many nodes the topology can hold: the product of the fat tree's down counts."""
        if self.topology == "star":
            return math.inf  # type: ignore[return-value]
        return math.prod(int(count) for count in self.fat_tree.split(";")[1].split(","))


def check_fat_tree(description: str) -> None:
    """Refuse what is not SimGrid's fat-tree description "levels;down;up;link_counts"."""
    parts = description.split(";")
    try:
        levels = int(parts[0])
        counts = [[int(c) for c in part.split(",")] for part in parts[1:]]
    except (ValueError, IndexError):
        counts, levels = [], -1
    if len(parts) != 4 or levels < 1 or any(len(c) != levels or min(c) < 1 for c in counts):
        raise PlatformError(
            f"fat_tree {description!r} is not SimGrid's 'levels;down;up;link_counts' "
            "(e.g. '2;32,16;1,16;2,1': each list has one count per level, all >= 1)"
        )


@dataclass
class LocalStore:
    """The node-local store (SSD, tmpfs), one per node, shared by the node's ranks."""

    read_bandwidth: float
    write_bandwidth: float
    file_latency: float  # s a reader waits per file (open + first byte), beyond bandwidth

    def __post_init__(self) -> None:
        check_numbers(self, capacities=("read_bandwidth", "write_bandwidth"))


# each distribution's parameters besides `mean`
DISTRIBUTIONS = {"fixed": (), "lognormal": ("cv",), "pareto": ("shape",)}


@dataclass
class Distribution:
    """Seconds (or a factor) drawn at random: `fixed` (always `mean`), `lognormal` (`mean`, and `cv` =
    standard deviation / mean) or `pareto` (`mean`, and `shape` α > 1: the smaller α, the heavier the
    tail; its smallest value is mean·(α−1)/α). A distribution takes exactly its own parameters; one
    it does not take is left out (None, or 0 as it then reads)."""

    dist: str
    mean: float
    cv: Optional[float] = None
    shape: Optional[float] = None

    def __post_init__(self) -> None:
        example = "e.g. {dist: lognormal, mean: 8.3e-3, cv: 0.4}"
        if self.dist not in DISTRIBUTIONS:
            raise PlatformError(f"dist {self.dist!r} is not one of {list(DISTRIBUTIONS)}")
        params = DISTRIBUTIONS[self.dist]
        takes = f"a {self.dist} distribution takes exactly {sorted(('mean', *params))} ({example})"
        for name in ("cv", "shape"):
            if name in params and getattr(self, name) is None:
                raise PlatformError(f"{name} is missing: {takes}")
            if name not in params and getattr(self, name):
                raise PlatformError(f"{name} is not a parameter here: {takes}")
        self.cv, self.shape = self.cv or 0.0, self.shape or 0.0
        check_numbers(self)
        if self.dist == "pareto" and self.shape <= 1:
            raise PlatformError(f"shape must be > 1 (a Pareto tail of shape <= 1 has no mean), got {self.shape}")

    def sample(self, rng, size: int):
        """`size` draws from numpy Generator `rng` (a float64 array)."""
        if self.dist == "fixed" or self.mean == 0:
            return np.full(size, self.mean)
        if self.dist == "lognormal":
            sigma2 = math.log1p(self.cv * self.cv)
            return rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), size)
        scale = self.mean * (self.shape - 1) / self.shape  # numpy's pareto is Lomax: x_m (1 + X) is Pareto
        return scale * (1.0 + rng.pareto(self.shape, size))

    def scv(self) -> float:
        """The squared coefficient of variation (variance / mean²); inf for a Pareto tail with α ≤ 2."""
        if self.dist == "fixed":
            return 0.0
        if self.dist == "lognormal":
            return self.cv * self.cv
        return math.inf if self.shape <= 2 else 1.0 / (self.shape * (self.shape - 2))


@dataclass
class SharedStorage:
    """The shared (parallel) file system every rank reads in global shuffling (scale/storage.py).

    read_bandwidth: aggregate bytes/s of its servers, shared by every reader.
    metadata_rate: files opened per second by the whole file system, shared by every reader.
    servers: independent FIFO queues a file's read waits in (the disks, or targets, holding files).
    service: the time one file's read holds its server (seek, rotation, transfer).
    file_latency: s a client waits per file outside the queues (RPC round trips to the metadata and
        data servers).
    client_spread: each node's file-system client multiplies its file_latency by a factor drawn once
        per epoch (clients differ: their routes, their RPC credits); `fixed` 1.0 for identical clients.
    background_load: the fraction of the servers' time other jobs take (a production file system);
        a file waits behind their requests as in an M/G/1 queue at that load.
    client_cpu_per_file: core-seconds of the node's CPU its client spends per file (a FUSE client
        such as GlusterFS's; near 0 for a kernel client).
    """

    read_bandwidth: float
    metadata_rate: float
    servers: int
    service: Distribution
    file_latency: float
    client_cpu_per_file: float
    client_spread: Distribution = field(default_factory=lambda: Distribution("fixed", 1.0))
    background_load: float = 0.0

    def __post_init__(self) -> None:
        check_numbers(self, capacities=("read_bandwidth", "servers", "metadata_rate"),
                      largest={"background_load": (0.99, "at 1 the servers would never serve this job")})


@dataclass
class Loader:
    """The data loader of a rank: `workers` files in flight, `prefetch` batches read ahead (0: in the
    loop), `cpu_per_file` core-seconds of the node's CPU per file (decode, augment, copy)."""

    workers: int
    prefetch: int
    cpu_per_file: float

    def __post_init__(self) -> None:
        check_numbers(self, capacities=("workers",))


BACKWARD_SHARE = 2 / 3  # of FW+BW: backward costs about twice the forward's FLOPs (its two GEMMs per layer)


@dataclass
class Allreduce:
    """α–β model of the gradient allreduce: 2(M−1)·α + 2(M−1)/M · bytes / bandwidth (ring), run in
    buckets of `bucket_bytes` as DDP does. `overlap`: the share of its speed a bucket's allreduce keeps
    while backward still computes (0: it all runs after backward, as hpcshuffle's own learner does it;
    1: communication and backward never slow each other)."""

    alpha: float
    bandwidth: float
    overlap: float = 0.0
    bucket_bytes: float = 2.5e7  # DDP's bucket_cap_mb default, 25 MB

    def __post_init__(self) -> None:
        check_numbers(self, capacities=("bandwidth", "bucket_bytes"),
                      largest={"overlap": (1.0, "1: the allreduce keeps its full speed during backward")})

    def seconds(self, ranks: int, gradient_bytes: float) -> float:
        """The whole allreduce of `gradient_bytes` over `ranks` ranks, in seconds; 0 for one rank."""
        if ranks < 2:
            return 0.0
        return 2 * (ranks - 1) * self.alpha + 2 * (ranks - 1) / ranks * gradient_bytes / self.bandwidth

    def exposed(self, ranks: int, gradient_bytes: float, backward_s: float) -> float:
        """Seconds the allreduce adds after backward ends, its buckets started as backward fills them.

        Bucket k of n is ready at backward_s·(k+1)/n and takes 1/n of the allreduce; while backward
        runs it proceeds at `overlap` of its speed. Never negative: an iteration is never shorter
        than its backward, and the last bucket is ready only when backward ends."""
        total = self.seconds(ranks, gradient_bytes)
        if total == 0 or self.overlap == 0:
            return total
        buckets = max(1, math.ceil(gradient_bytes / self.bucket_bytes))
        clock = 0.0
        for bucket in range(buckets):
            clock = max(clock, backward_s * (bucket + 1) / buckets)
            work = total / buckets  # seconds of it at full speed
            if clock < backward_s:  # the part that fits before backward ends, at `overlap` speed
                during = min(backward_s - clock, work / self.overlap)
                clock += during
                work -= during * self.overlap
            clock += work
        return max(0.0, clock - backward_s)


@dataclass
class Exchange:
    """How PLS moves samples (scale/slots.py for the second scheduler).

    scheduler: "hpcshuffle" — the exchange's own threads move the samples, one message per
        destination per iteration; the training thread pays `cpu_per_sample` s per exchanged sample
        (handing it over) and `epoch_overhead` s at the end of every epoch that moved anything
        (commit, fsync, cleanup). "kakurenbo" — the PLS authors' scheduler (their public code, commit
        15eb317, ImageNet/utils/scheduler.py): on the training thread, one exchanged sample at a
        time, each after a barrier of every rank, sent alone to a peer drawn by a permutation of the
        ranks, costing `slot_cpu` s (read, decode, pickle; unpickle, encode, write at the receiver) and
        `slot_bytes` on the wire (decoded pixels; 0: the stored sample's bytes); one more barrier an
        iteration for what was received.
    noise: jitter of the training thread's work, drawn per rank for every FW+BW and every slot, so
        the barriers and the allreduce wait for the slowest draw (OS noise, interference).
    """

    cpu_per_sample: float
    epoch_overhead: float
    scheduler: str = "hpcshuffle"
    slot_cpu: float = 0.0
    slot_bytes: float = 0.0
    noise: Distribution = field(default_factory=lambda: Distribution("fixed", 0.0))

    def __post_init__(self) -> None:
        check_numbers(self)
        if self.scheduler not in SCHEDULERS:
            raise PlatformError(f"scheduler {self.scheduler!r} is not one of {list(SCHEDULERS)}")


@dataclass
class Model:
    """One network on this platform's accelerator: FW+BW seconds per sample, gradient bytes allreduced."""

    fwbw_per_sample: float
    gradient_bytes: float

    def __post_init__(self) -> None:
        check_numbers(self)


@dataclass
class Dataset:
    """One dataset on this platform: N samples of `sample_bytes` bytes each (the mean)."""

    samples: int
    sample_bytes: float

    def __post_init__(self) -> None:
        check_numbers(self)


@dataclass(frozen=True)
class Platform:
    """A cluster and the workloads it is described for; see conf/platform/abci.yaml for every key."""

    name: str
    nodes: int
    ranks_per_node: int
    cpu_cores_per_node: int  # the node's CPU cores: loaders, file-system clients, and FW+BW where no accelerator
    accelerators_per_node: int  # GPUs; 0: FW+BW runs on the CPU cores
    network: Network
    local: LocalStore
    shared: SharedStorage
    loader: Loader
    allreduce: Allreduce
    exchange: Exchange
    models: dict[str, Model]
    datasets: dict[str, Dataset]
    description: str = ""
    machine_cores: int = 0  # > 0: the nodes are namespaces of one machine, all sharing its this many cores
    source: str = ""  # the file it was read from
    # kept for the record and for re-deriving variants: `calibration:` notes, `ranges:` (each knob's
    # sourced low/high, read by `scale --sensitivity`) and `raw` (the mapping this was built from)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("nodes", "ranks_per_node", "cpu_cores_per_node"):
            at_least(name, getattr(self, name), error=PlatformError)
        at_least("accelerators_per_node", self.accelerators_per_node, 0, "(0: FW+BW on the CPU cores)",
                 error=PlatformError)
        at_least("machine_cores", self.machine_cores, 0, "(0: each node has its own cores)", error=PlatformError)
        for table in ("models", "datasets"):
            if not getattr(self, table):
                raise PlatformError(f"{table}: needs at least one named entry, got {getattr(self, table)!r}")

    def nodes_for(self, workers: int) -> int:
        """Nodes a run of `workers` ranks occupies (ranks fill nodes in order)."""
        self.check_workers(workers)
        return -(-workers // self.ranks_per_node)

    def check_workers(self, workers: int) -> None:
        """PlatformError unless `workers` ranks (at least 1) fit the platform's nodes and its network's leaves."""
        at_least("workers", workers, error=PlatformError)
        capacity = min(self.nodes, self.network.leaves()) * self.ranks_per_node
        if workers > capacity:
            raise PlatformError(
                f"platform {self.name} ({self.source}) holds at most {capacity} ranks "
                f"({min(self.nodes, self.network.leaves())} nodes × {self.ranks_per_node} ranks per node), "
                f"asked for {workers}; use fewer workers, or a platform with more nodes "
                f"(nodes: and network.fat_tree: in the yaml)"
            )

    def model(self, name: str) -> Model:
        """The model named `name`; PlatformError naming the platform's models otherwise."""
        return _pick(self.models, name, "model", self)

    def dataset(self, name: str) -> Dataset:
        """The dataset named `name`; PlatformError naming the platform's datasets otherwise."""
        return _pick(self.datasets, name, "dataset", self)


def _pick(table: dict, name: str, what: str, platform: Platform):
    try:
        return table[name]
    except KeyError:
        raise PlatformError(
            f"platform {platform.name} ({platform.source}) describes no {what} {name!r}; "
            f"choose one of {sorted(table)} or add it under {what}s: in the yaml"
        ) from None
