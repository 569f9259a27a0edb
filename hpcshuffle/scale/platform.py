"""A simulated cluster as config: `conf/platform/<name>.yaml`, loaded and checked into `Platform`.

Every number of a platform is a plain SI value (bytes, bytes/s, seconds); the shipped files say
where each one comes from. Unknown keys, missing keys and a topology that cannot hold the asked
worker count are refused with the file and the fix named, so a typo never silently simulates a
default.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PLATFORM_DIR = Path(__file__).resolve().parents[2] / "conf" / "platform"
TOPOLOGIES = ("fat_tree", "star")


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


@dataclass(frozen=True)
class SharedStorage:
    """The shared (parallel) file system every rank reads in global shuffling.

    read_bandwidth: aggregate bytes/s of its servers, shared by every reader.
    read_rate: small files per second its data servers deliver in random order (disks × random
        reads per disk: what bounds ImageNet-style reads on spinning disks), shared by every reader.
    metadata_rate: files opened per second by the whole file system, shared by every reader.
    file_latency: s one client waits per file (RPCs to metadata and data servers, disk seek).
    client_cpu_per_file: core-seconds of the node's CPU its client spends per file (a FUSE client
        such as GlusterFS's; near 0 for a kernel client).
    """

    read_bandwidth: float
    read_rate: float
    metadata_rate: float
    file_latency: float
    client_cpu_per_file: float


@dataclass(frozen=True)
class Loader:
    """The data loader of a rank: `workers` files in flight, `prefetch` batches read ahead (0: in the
    loop), `cpu_per_file` core-seconds of the node's CPU per file (decode, augment, copy)."""

    workers: int
    prefetch: int
    cpu_per_file: float


@dataclass(frozen=True)
class Allreduce:
    """α–β model of the gradient allreduce: 2(M−1)·α + 2(M−1)/M · bytes / bandwidth (ring)."""

    alpha: float
    bandwidth: float

    def seconds(self, ranks: int, gradient_bytes: float) -> float:
        if ranks < 2:
            return 0.0
        return 2 * (ranks - 1) * self.alpha + 2 * (ranks - 1) / ranks * gradient_bytes / self.bandwidth


@dataclass(frozen=True)
class Exchange:
    """The exchange's cost on the training thread: `cpu_per_sample` s per exchanged sample (read,
    frame, copy, write), and `epoch_overhead` s at the end of every epoch that moved anything
    (commit, fsync, cleanup), whatever it moved."""

    cpu_per_sample: float
    epoch_overhead: float


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
           "accelerators_per_node": int}
OPTIONAL = {"description", "calibration", "ranges"}
# capacities the simulation divides by or waits on: 0 would deadlock SimGrid or divide by zero
POSITIVE = {(Network, "link_bandwidth"), (Network, "intra_node_bandwidth"), (LocalStore, "read_bandwidth"),
            (LocalStore, "write_bandwidth"), (SharedStorage, "read_bandwidth"), (SharedStorage, "read_rate"),
            (SharedStorage, "metadata_rate"), (Loader, "workers"), (Allreduce, "bandwidth")}


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
    network = values["network"]
    if network.topology not in TOPOLOGIES:
        raise PlatformError(f"{source}: network.topology {network.topology!r} is not one of {list(TOPOLOGIES)}")
    if network.topology == "fat_tree":
        _check_fat_tree(network.fat_tree, source)
    if min(values["nodes"], values["ranks_per_node"], values["cpu_cores_per_node"]) < 1 or values["accelerators_per_node"] < 0:
        raise PlatformError(f"{source}: nodes, ranks_per_node and cpu_cores_per_node must be >= 1, "
                            "accelerators_per_node >= 0 (0: FW+BW on the CPU cores)")
    return Platform(**values, source=source,
                    extra={"calibration": raw.get("calibration"), "ranges": raw.get("ranges") or {}, "raw": raw})


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
        kind = {"int": int, "float": float, "str": str}[str(fields[name].type)]
        values[name] = _scalar(value, kind, source, f"{key}.{name}")
        if kind is not str and values[name] < 0:
            raise PlatformError(f"{source}: {key}.{name} must be >= 0, got {value}")
        if (cls, name) in POSITIVE and values[name] == 0:
            raise PlatformError(f"{source}: {key}.{name} must be > 0 (a capacity of 0 never finishes), got {value}")
    return cls(**values)


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
