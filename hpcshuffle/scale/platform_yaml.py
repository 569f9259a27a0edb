"""A simulated cluster as config: `conf/platform/<name>.yaml`, loaded and checked into `Platform`
(scale/platform.py).

Unknown keys, missing keys and values out of their range are refused with the file and the fix
named, so a typo never silently simulates a default (a topology that cannot hold the asked worker
count is refused by `Platform.check_workers`, when the worker count is known).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any

import yaml

from hpcshuffle.scale.platform import (
    DISTRIBUTIONS,
    SCHEDULERS,
    TOPOLOGIES,
    Allreduce,
    Dataset,
    Distribution,
    Exchange,
    Loader,
    LocalStore,
    Model,
    Network,
    Platform,
    PlatformError,
    SharedStorage,
)

PLATFORM_DIR = Path(__file__).resolve().parents[2] / "conf" / "platform"
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
    """The platform in conf/platform/<name>.yaml, or in the yaml file at a path; PlatformError for an
    unknown name or a file that is not a valid platform."""
    path = platform_path(name_or_path)
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise PlatformError(f"{path}: a platform is a mapping of keys, got {type(raw).__name__}")
    return platform_from_dict(raw, str(path))


def platform_from_dict(raw: dict[str, Any], source: str = "<dict>") -> Platform:
    """The platform `raw` (a parsed yaml mapping) describes, every key checked; PlatformError naming
    `source` and the key for an unknown, missing or invalid one."""
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
