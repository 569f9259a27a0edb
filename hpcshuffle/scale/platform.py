"""A simulated cluster as config: `conf/platform/<name>.yaml`, loaded and checked into `Platform`.

Every number of a platform is a plain SI value (bytes, bytes/s, seconds); the shipped files say
where each one comes from. Unknown keys, missing keys and a topology that cannot hold the asked
worker count are refused with the file and the fix named, so a typo never silently simulates a
default.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

PLATFORM_DIR = Path(__file__).resolve().parents[2] / "conf" / "platform"
TOPOLOGIES = ("fat_tree", "star")
SCHEDULERS = ("hpcshuffle", "kakurenbo")


class PlatformError(ValueError):
    """A platform file that cannot be simulated; the message names the file, the key and the fix."""


@dataclass(frozen=True)
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

    def leaves(self) -> int:
        """How many nodes the topology can hold: the product of the fat tree's down counts."""
        if self.topology == "star":
            return math.inf  # type: ignore[return-value]
        return math.prod(int(count) for count in self.fat_tree.split(";")[1].split(","))


@dataclass(frozen=True)
class LocalStore:
    """The node-local store (SSD, tmpfs), one per node, shared by the node's ranks."""

    read_bandwidth: float
    write_bandwidth: float
    file_latency: float  # s a reader waits per file (open + first byte), beyond bandwidth


DISTRIBUTIONS = ("fixed", "lognormal", "pareto")


@dataclass(frozen=True)
class Distribution:
    """Seconds (or a factor) drawn at random: `fixed` (always `mean`), `lognormal` (`mean`, and `cv` =
    standard deviation / mean) or `pareto` (`mean`, and `shape` α > 1: the smaller α, the heavier the
    tail; its smallest value is mean·(α−1)/α)."""

    dist: str
    mean: float
    cv: float = 0.0
    shape: float = 0.0

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


@dataclass(frozen=True)
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
    client_spread: Distribution = Distribution("fixed", 1.0)
    background_load: float = 0.0


@dataclass(frozen=True)
class Loader:
    """The data loader of a rank: `workers` files in flight, `prefetch` batches read ahead (0: in the
    loop), `cpu_per_file` core-seconds of the node's CPU per file (decode, augment, copy)."""

    workers: int
    prefetch: int
    cpu_per_file: float


BACKWARD_SHARE = 2 / 3  # of FW+BW: backward costs about twice the forward's FLOPs (its two GEMMs per layer)


@dataclass(frozen=True)
class Allreduce:
    """α–β model of the gradient allreduce: 2(M−1)·α + 2(M−1)/M · bytes / bandwidth (ring), run in
    buckets of `bucket_bytes` as DDP does. `overlap`: the share of its speed a bucket's allreduce keeps
    while backward still computes (0: it all runs after backward, as hpcshuffle's own learner does it;
    1: communication and backward never slow each other)."""

    alpha: float
    bandwidth: float
    overlap: float = 0.0
    bucket_bytes: float = 2.5e7  # DDP's bucket_cap_mb default, 25 MB

    def seconds(self, ranks: int, gradient_bytes: float) -> float:
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


@dataclass(frozen=True)
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
    noise: Distribution = Distribution("fixed", 0.0)


@dataclass(frozen=True)
class Model:
    """One network on this platform's accelerator: FW+BW seconds per sample, gradient bytes allreduced."""

    fwbw_per_sample: float
    gradient_bytes: float


@dataclass(frozen=True)
class Dataset:
    samples: int
    sample_bytes: float


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

    def nodes_for(self, workers: int) -> int:
        """Nodes a run of `workers` ranks occupies (ranks fill nodes in order)."""
        self.check_workers(workers)
        return -(-workers // self.ranks_per_node)

    def check_workers(self, workers: int) -> None:
        if workers < 1:
            raise PlatformError(f"workers must be >= 1, got {workers}")
        capacity = min(self.nodes, self.network.leaves()) * self.ranks_per_node
        if workers > capacity:
            raise PlatformError(
                f"platform {self.name} ({self.source}) holds at most {capacity} ranks "
                f"({min(self.nodes, self.network.leaves())} nodes × {self.ranks_per_node} ranks per node), "
                f"asked for {workers}; use fewer workers, or a platform with more nodes "
                f"(nodes: and network.fat_tree: in the yaml)"
            )

    def model(self, name: str) -> Model:
        return _pick(self.models, name, "model", self)

    def dataset(self, name: str) -> Dataset:
        return _pick(self.datasets, name, "dataset", self)


def _pick(table: dict, name: str, what: str, platform: Platform):
    try:
        return table[name]
    except KeyError:
        raise PlatformError(
            f"platform {platform.name} ({platform.source}) describes no {what} {name!r}; "
            f"choose one of {sorted(table)} or add it under {what}s: in the yaml"
        ) from None


SECTIONS = {
    "network": Network, "local": LocalStore, "shared": SharedStorage, "loader": Loader,
    "allreduce": Allreduce, "exchange": Exchange,
}
TABLES = {"models": Model, "datasets": Dataset}
SCALARS = {"name": str, "description": str, "nodes": int, "ranks_per_node": int, "cpu_cores_per_node": int,
           "accelerators_per_node": int, "machine_cores": int}
OPTIONAL = {"description", "calibration", "ranges", "machine_cores"}
# capacities the simulation divides by or waits on: 0 would deadlock SimGrid or divide by zero
POSITIVE = {(Network, "link_bandwidth"), (Network, "intra_node_bandwidth"), (LocalStore, "read_bandwidth"),
            (LocalStore, "write_bandwidth"), (SharedStorage, "read_bandwidth"), (SharedStorage, "servers"),
            (SharedStorage, "metadata_rate"), (Loader, "workers"), (Allreduce, "bandwidth"),
            (Allreduce, "bucket_bytes")}
# shares of something: (largest allowed, the message's reason)
FRACTIONS = {(SharedStorage, "background_load"): (0.99, "at 1 the servers would never serve this job"),
             (Allreduce, "overlap"): (1.0, "1: the allreduce keeps its full speed during backward")}


def platform_path(name_or_path: str) -> Path:
    """`abci` → conf/platform/abci.yaml; a path to a yaml file is taken as it is."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_file():
            raise PlatformError(f"platform file {candidate} does not exist")
        return candidate
    path = PLATFORM_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PLATFORM_DIR.glob("*.yaml"))
        raise PlatformError(
            f"unknown platform {name_or_path!r}; choose one of {known}, pass a yaml file's path, or write "
            f"one with `hpcshuffle scale calibrate RUN_DIR... --out conf/platform/NAME.yaml`"
        )
    return path


def load_platform(name_or_path: str) -> Platform:
    path = platform_path(name_or_path)
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise PlatformError(f"{path}: a platform is a mapping of keys, got {type(raw).__name__}")
    return platform_from_dict(raw, str(path))


def platform_from_dict(raw: dict[str, Any], source: str = "<dict>") -> Platform:
    allowed = set(SCALARS) | set(SECTIONS) | set(TABLES) | OPTIONAL
    _refuse_unknown(raw, allowed, source, "")
    missing = sorted((set(SCALARS) | set(SECTIONS) | set(TABLES)) - set(raw) - OPTIONAL)
    if missing:
        raise PlatformError(f"{source}: missing {', '.join(missing)}; see conf/platform/abci.yaml for every key")
    values: dict[str, Any] = {}
    for key, kind in SCALARS.items():
        if key in raw:
            values[key] = _scalar(raw[key], kind, source, key)
    for key, cls in SECTIONS.items():
        values[key] = _section(raw[key], cls, source, key)
    for key, cls in TABLES.items():
        table = raw[key]
        if not isinstance(table, dict) or not table:
            raise PlatformError(f"{source}: {key}: needs at least one named entry, got {table!r}")
        values[key] = {name: _section(entry, cls, source, f"{key}.{name}") for name, entry in table.items()}
    if values["exchange"].scheduler not in SCHEDULERS:
        raise PlatformError(f"{source}: exchange.scheduler {values['exchange'].scheduler!r} is not one of {list(SCHEDULERS)}")
    network = values["network"]
    if network.topology not in TOPOLOGIES:
        raise PlatformError(f"{source}: network.topology {network.topology!r} is not one of {list(TOPOLOGIES)}")
    if network.topology == "fat_tree":
        _check_fat_tree(network.fat_tree, source)
    if (min(values["nodes"], values["ranks_per_node"], values["cpu_cores_per_node"]) < 1
            or min(values["accelerators_per_node"], values.get("machine_cores", 0)) < 0):
        raise PlatformError(f"{source}: nodes, ranks_per_node and cpu_cores_per_node must be >= 1, "
                            "accelerators_per_node >= 0 (0: FW+BW on the CPU cores), machine_cores >= 0")
    return Platform(**values, source=source,
                    extra={"calibration": raw.get("calibration"), "ranges": raw.get("ranges") or {}, "raw": raw})


def with_values(platform: Platform, values: dict[str, Any]) -> Platform:
    """`platform` with each dotted path of its yaml (e.g. "exchange.noise.mean") set to its value,
    built and checked as a platform file is (PlatformError names a bad one)."""
    raw = copy.deepcopy(platform.extra["raw"])
    for path, value in values.items():
        *parents, last = path.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return platform_from_dict(raw, platform.source)


def _refuse_unknown(raw: dict, allowed: set[str], source: str, prefix: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise PlatformError(
            f"{source}: unknown key {prefix}{unknown[0]}; the keys here are {sorted(allowed)} "
            "(conf/platform/abci.yaml documents each)"
        )


def _section(raw: Any, cls: type, source: str, key: str):
    if not isinstance(raw, dict):
        raise PlatformError(f"{source}: {key}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _refuse_unknown(raw, set(fields), source, f"{key}.")
    required = [name for name, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in raw]
    if missing:
        raise PlatformError(f"{source}: {key}: missing {', '.join(missing)}")
    values = {}
    for name, value in raw.items():
        if str(fields[name].type) == "Distribution":
            values[name] = _distribution(value, source, f"{key}.{name}")
            continue
        kind = {"int": int, "float": float, "str": str}[str(fields[name].type)]
        values[name] = _scalar(value, kind, source, f"{key}.{name}")
        if kind is not str and values[name] < 0:
            raise PlatformError(f"{source}: {key}.{name} must be >= 0, got {value}")
        if (cls, name) in POSITIVE and values[name] == 0:
            raise PlatformError(f"{source}: {key}.{name} must be > 0 (a capacity of 0 never finishes), got {value}")
        if (cls, name) in FRACTIONS and values[name] > FRACTIONS[cls, name][0]:
            largest, why = FRACTIONS[cls, name]
            raise PlatformError(f"{source}: {key}.{name} must be <= {largest} ({why}), got {value}")
    return cls(**values)


def _distribution(raw: Any, source: str, key: str) -> Distribution:
    """A `{dist: ..., mean: ..., cv|shape: ...}` mapping, every parameter checked."""
    example = "e.g. {dist: lognormal, mean: 8.3e-3, cv: 0.4}"
    if not isinstance(raw, dict) or "dist" not in raw:
        raise PlatformError(f"{source}: {key}: expected a distribution, {example}, got {raw!r}")
    dist = str(raw["dist"])
    if dist not in DISTRIBUTIONS:
        raise PlatformError(f"{source}: {key}.dist {dist!r} is not one of {list(DISTRIBUTIONS)}")
    params = {"fixed": {"mean"}, "lognormal": {"mean", "cv"}, "pareto": {"mean", "shape"}}[dist]
    given = set(raw) - {"dist"}
    if given != params:
        raise PlatformError(f"{source}: {key}: a {dist} distribution takes exactly {sorted(params)}, "
                            f"got {sorted(given)} ({example})")
    values = {name: _scalar(raw[name], float, source, f"{key}.{name}") for name in params}
    for name, number in values.items():
        if number < 0:
            raise PlatformError(f"{source}: {key}.{name} must be >= 0, got {raw[name]}")
    if dist == "pareto" and values["shape"] <= 1:
        raise PlatformError(f"{source}: {key}.shape must be > 1 (a Pareto tail of shape <= 1 has no mean), "
                            f"got {raw['shape']}")
    return Distribution(dist, **values)


def _scalar(value: Any, kind: type, source: str, key: str):
    if kind is str:
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlatformError(f"{source}: {key} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise PlatformError(f"{source}: {key} must be a finite number, got {value!r}")
    if kind is int:
        if number != int(number):
            raise PlatformError(f"{source}: {key} must be a whole number, got {value!r}")
        return int(number)
    return number


def _check_fat_tree(description: str, source: str) -> None:
    parts = description.split(";")
    try:
        levels = int(parts[0])
        counts = [[int(c) for c in part.split(",")] for part in parts[1:]]
    except (ValueError, IndexError):
        counts, levels = [], -1
    if len(parts) != 4 or levels < 1 or any(len(c) != levels or min(c) < 1 for c in counts):
        raise PlatformError(
            f"{source}: network.fat_tree {description!r} is not SimGrid's 'levels;down;up;link_counts' "
            "(e.g. '2;32,16;1,16;2,1': each list has one count per level, all >= 1)"
        )
