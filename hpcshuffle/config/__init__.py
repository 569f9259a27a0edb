"""The typed run configuration: built once from Hydra's DictConfig at the entry point, checked here.

Every config group has its dataclass (groups.py), registered in Hydra's ConfigStore as the
group's `schema`; `RunConfig` holds one of each plus the run's top-level settings and checks what
spans groups (which storage options a strategy can use, what virtual workers allow). Library code
below the entry point takes plain values from this object, never a DictConfig.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import PurePath

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from hpcshuffle.config.groups import (
    CacheConfig,
    CheckpointConfig,
    DatasetConfig,
    LoaderConfig,
    LoggerConfig,
    LossConfig,
    ModelConfig,
    ShuffleConfig,
    StorageConfig,
    WorldConfig,
)
from hpcshuffle.config.optim import OptimConfig
from hpcshuffle.errors import ConfigError, at_least
from hpcshuffle.plan import HOME_SHARED, STRATEGIES, Strategy

PRECISIONS = ("fp32", "bf16")

# group -> its dataclass; the groups with a conf/<group>/ directory get it as their schema
GROUPS = {
    "shuffle": ShuffleConfig, "dataset": DatasetConfig, "optim": OptimConfig, "storage": StorageConfig,
    "loader": LoaderConfig, "cache": CacheConfig, "checkpoint": CheckpointConfig, "logger": LoggerConfig,
    "world": WorldConfig, "loss": LossConfig,
}
SCHEMA_GROUPS = ("shuffle", "dataset", "optim", "storage", "loader", "cache", "checkpoint", "logger")
for _group in SCHEMA_GROUPS:
    ConfigStore.instance().store(group=_group, name="schema", node=GROUPS[_group])


@dataclass(frozen=True)
class RunConfig:
    """A whole run's settings: one config per group, and the run's own top-level keys (conf/config.yaml).

    Built once at the entry point (`from_hydra`); every check, including those spanning groups,
    raises ConfigError when it is built.

    Attributes:
        batch_size: b, samples per rank per step.
        seed: the shared seed of partitions, exchanges, orders and model initialisation.
        device: "cpu" (gloo) or "cuda" (NCCL).
        precision: "fp32", or "bf16" (autocast for forward and backward; weights stay fp32).
        channels_last: NHWC memory format for the model and its inputs.
        threads: torch threads per rank.
        audit: write audit.jsonl: per epoch and rank, the ids held and trained on.
        progress: progress bars on rank 0 (only when stderr is a terminal).
    """

    shuffle: ShuffleConfig
    dataset: DatasetConfig
    model: ModelConfig
    optim: OptimConfig
    epochs: int
    batch_size: int
    seed: int = 0
    storage: StorageConfig = field(default_factory=StorageConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    world: WorldConfig = field(default_factory=WorldConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    device: str = "cpu"
    precision: str = "fp32"
    channels_last: bool = False
    threads: int = 1
    audit: bool = False
    progress: bool = False

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "threads"):
            at_least(name, getattr(self, name), error=ConfigError)
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        self._check_shared_storage_options()
        self._check_virtual()
        self._check_decode()
        self._place_dataset()

    @property
    def strategy(self) -> Strategy:
        """The strategy record of `shuffle.name` (plan/strategies.py)."""
        return self.shuffle.strategy

    def ranks_per_node(self, node_size: int, layout: str, workers: int) -> int:
        """R, the ranks that share one node's store in this run (1: rank scope), by storage.scope.

        Args:
            node_size: ranks per node (`world.node_size`: MPI's, or storage.ranks_per_node), 0 if
                the nodes do not each run the same number of consecutive ranks (`layout` says why).
            workers: the run's workers (this job's ranks).
        """
        scope, strategy = self.storage.scope, self.strategy
        if scope == "rank":
            return 1
        if not strategy.node_scope or self.shuffle.virtual_workers:
            if scope == "node":
                why = ("shuffle.virtual_workers simulates the workers in one process, with no node stores"
                       if self.shuffle.virtual_workers else
                       f"shuffle={strategy.name} reads shared storage and has no partition to share")
                raise ConfigError(f"storage.scope=node shares a node's partition among its ranks, but {why}: "
                                  "set storage.scope=rank (or auto)", collective=True)
            return 1
        if node_size == 0:
            if scope == "node":
                raise ConfigError(
                    f"storage.scope=node needs every node to run the same number of consecutive ranks, but {layout}; "
                    "launch with block placement (mpiexec's default, srun --distribution=block), set "
                    "storage.ranks_per_node to a divisor of the ranks per node, or use storage.scope=rank",
                    collective=True,
                )
            return 1
        if scope == "auto" and (node_size < 2 or workers // node_size < 2):
            return 1  # one rank per node, or one node: node scope would change nothing, or leave nothing to exchange
        return node_size

    def _check_shared_storage_options(self) -> None:
        """A node replica and a planned cache stand in front of shared storage: only strategies
        that train from shared storage have one."""
        shared = " or ".join(f"shuffle={s.name}" for s in STRATEGIES.values() if s.home == HOME_SHARED)
        reads_shared = self.strategy.home == HOME_SHARED
        if self.storage.replica and not reads_shared:
            raise ConfigError(
                f"storage.replica=true keeps a full replica per node for {shared}; shuffle={self.shuffle.name} "
                "stages only each rank's partition: drop storage.replica"
            )
        if self.cache.enabled and (not reads_shared or self.storage.replica):
            raise ConfigError(
                f"cache.policy={self.cache.policy} caches reads from shared storage, which only {shared} "
                f"without storage.replica makes; shuffle={self.shuffle.name} reads node-local copies already: "
                "set cache.policy=none"
            )

    def _place_dataset(self) -> None:
        """With storage.shared_dir, a relative dataset.root lies under it and an absolute one must."""
        shared_dir, root = self.storage.shared_dir, self.dataset.root
        if shared_dir is None:
            return
        if not root.is_absolute():
            self.dataset.root = shared_dir / root
        elif root != shared_dir and shared_dir not in root.parents:
            raise ConfigError(
                f"dataset.root {root} is not under storage.shared_dir {shared_dir}: give dataset.root relative "
                "to the shared file system's mount, or set storage.shared_dir=null to read it where it is"
            )

    def _check_virtual(self) -> None:
        if not self.shuffle.virtual_workers:
            return
        chunk = self.shuffle.virtual_chunk
        if self.model.norm == "global" and chunk not in (0, self.shuffle.virtual_workers):
            raise ConfigError(
                f"model.norm=global normalises over the step's whole global batch, which shuffle.virtual_chunk={chunk} "
                "splits into passes: set shuffle.virtual_chunk=0"
            )
        if self.loader.on_error != "fail":
            raise ConfigError(
                "shuffle.virtual_workers normalises each virtual worker's whole local batch, which a skipped "
                "sample would break: set loader.on_error=fail"
            )
        if self.cache.enabled or self.storage.replica:
            raise ConfigError(
                "shuffle.virtual_workers simulates the training, not the I/O: it reads shared storage directly; "
                "set cache.policy=none and storage.replica=false"
            )

    def _check_decode(self) -> None:
        if self.loader.decode == "gpu" and self.dataset.format != "imagefolder":
            raise ConfigError(
                f"loader.decode=gpu decodes JPEG images (dataset.format=imagefolder), but dataset.format is "
                f"{self.dataset.format}: use loader.decode=cpu"
            )

    @classmethod
    def from_hydra(cls, cfg: DictConfig) -> RunConfig:
        """The typed config of Hydra's composed `cfg`, interpolations resolved; ConfigError for an
        unknown key (a typo) or a value a group's check refuses."""
        settings = OmegaConf.to_container(cfg, resolve=True)
        try:
            groups = {group: build(typed_class, settings.pop(group, {}), group) for group, typed_class in GROUPS.items()}
            model = settings.pop("model")
            name, norm = model.pop("name"), model.pop("norm", "worker")
            groups["model"] = ModelConfig(name, model, norm)
            top_level = {f.name for f in fields(cls)} - set(groups)
            check_keys(settings, top_level, "the config")
            settings["progress"] = settings.get("progress", False) and sys.stderr.isatty()  # logs get the table only
            return cls(**settings, **groups)
        except ValueError as err:  # a component's own check (OptimConfig)
            raise ConfigError(str(err)) from None


def check_keys(settings: dict, known: set[str], group: str) -> None:
    """Fail naming the first key of `settings` that is not a setting of `group` (a typo)."""
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"{group}.{unknown[0]} is not a setting of {group}; known: {', '.join(sorted(known))}")


def build(typed_class, settings: dict, group: str):
    """`typed_class(**settings)` once every key is one of its fields; lists become tuples."""
    check_keys(settings, {f.name for f in fields(typed_class)}, group)
    return typed_class(**{key: tuple(value) if isinstance(value, list) else value for key, value in settings.items()})


def resolved_yaml(cfg: DictConfig, leave_out: tuple[str, str] | None = None) -> str:
    """The run's config as YAML, every interpolation resolved (what ranks must agree on), less the
    key `leave_out` = (group, key). Paths (the schemas type them) are written as strings, so any
    YAML reader takes the file back."""
    settings = plain(OmegaConf.to_container(cfg, resolve=True))
    if leave_out is not None:
        group, key = leave_out
        settings.get(group, {}).pop(key, None)
    return OmegaConf.to_yaml(OmegaConf.create(settings), sort_keys=True)


def plain(value):
    """`value` with every path turned into its string, in nested dicts and lists."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return str(value) if isinstance(value, PurePath) else value


__all__ = [
    "CacheConfig", "CheckpointConfig", "DatasetConfig", "LoaderConfig", "LoggerConfig", "LossConfig",
    "ModelConfig", "RunConfig", "ShuffleConfig", "StorageConfig", "WorldConfig", "resolved_yaml",
]
