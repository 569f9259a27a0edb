"""A simulated cluster as config: `conf/platform/<name>.yaml`, loaded into `Platform`
(scale/platform.py) through an OmegaConf structured config.

OmegaConf refuses unknown keys, missing keys and values of the wrong type; each section's
`__post_init__` refuses values out of their range. Either way the error names the file, the key
and the fix, so a typo never silently simulates a default (a topology that cannot hold the asked
worker count is refused by `Platform.check_workers`, when the worker count is known).
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import MISSING, field, fields, make_dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from hpcshuffle.scale.platform import Platform, PlatformError

PLATFORM_DIR = Path(__file__).resolve().parents[2] / "conf" / "platform"
DOCUMENTED = "conf/platform/abci.yaml documents each"
RECORD = ("calibration", "ranges")  # kept as written, in Platform.extra; never typed


def _file_keys() -> type:
    """The keys of a platform file as a dataclass (OmegaConf's schema): `Platform`'s fields less what
    loading adds (`source`, `extra`), plus the record's `calibration:` notes and `ranges:`."""
    types = typing.get_type_hints(Platform)
    keys = [(f.name, types[f.name], field() if f.default is MISSING else field(default=f.default))
            for f in fields(Platform) if f.name not in ("source", "extra")]
    return make_dataclass("PlatformFile", keys + [(key, Optional[Any], field(default=None)) for key in RECORD])


PlatformFile = _file_keys()


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
    `source`, the key and the fix for an unknown, missing or invalid one."""
    config = OmegaConf.structured(PlatformFile)
    for key, value in raw.items():  # one key at a time, so an error OmegaConf places nowhere has its key
        try:
            config.merge_with({key: None if key in RECORD else value})
        except OmegaConfBaseException as err:
            raise PlatformError(_omegaconf_message(err, source, key)) from None
    missing = sorted(OmegaConf.missing_keys(config))
    if missing:
        raise PlatformError(f"{source}: missing {', '.join(missing)}; see conf/platform/abci.yaml for every key")
    try:
        built = _build(config, "")
        values = {f.name: getattr(built, f.name) for f in dataclasses.fields(PlatformFile) if f.name not in RECORD}
        return Platform(**values, source=source,
                        extra={"calibration": raw.get("calibration"), "ranges": raw.get("ranges") or {}, "raw": raw})
    except PlatformError as err:
        raise PlatformError(f"{source}: {err}") from None


def with_values(platform: Platform, values: dict[str, Any]) -> Platform:
    """`platform` with each dotted path of its yaml (e.g. "exchange.noise.mean") set to its value,
    built and checked as a platform file is (PlatformError names a bad one). A whole float where the
    yaml has an int (a `ranges:` bound of a count) is set as that int, the type the count needs."""
    raw = copy.deepcopy(platform.extra["raw"])
    for path, value in values.items():
        *parents, last = path.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        was = node.get(last)
        whole = isinstance(value, float) and value.is_integer()
        node[last] = int(value) if whole and isinstance(was, int) and not isinstance(was, bool) else value
    return platform_from_dict(raw, platform.source)


def _build(node: DictConfig, key: str) -> Any:
    """`node` as its object, every mapping below it built first, so that a section's range check
    (its `__post_init__`, whose error starts with the field's name) is reported under its own key."""
    for name in node:
        if isinstance(node[name], DictConfig):
            _build(node[name], f"{key}{name}.")
    try:
        return OmegaConf.to_object(node)
    except PlatformError as err:
        raise PlatformError(f"{key}{err}") from None


def _omegaconf_message(err: OmegaConfBaseException, source: str, key: str) -> str:
    """OmegaConf's refusal as one line naming the file, the key and what the keys here are."""
    where = getattr(err, "full_key", None) or key
    if isinstance(err, ConfigKeyError) and dataclasses.is_dataclass(err.object_type):
        allowed = sorted(f.name for f in dataclasses.fields(err.object_type))
        return f"{source}: unknown key {where}; the keys here are {allowed} ({DOCUMENTED})"
    reason = str(err).splitlines()[0]
    return f"{source}: {where}: {reason} ({DOCUMENTED} key)"
