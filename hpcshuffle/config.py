"""The typed run configuration: built once from Hydra's DictConfig at the entry point, checked here.

Library code below the entry point takes plain values from this object, never a DictConfig.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hpcshuffle.cache import POLICIES
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.optim import OptimConfig
from hpcshuffle.plan import STRATEGIES, get_strategy

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class DatasetConfig:
    """`conf/dataset/*.yaml`: which format, where, and how to decode it.

    Attributes:
        synthesize: when set, rank 0 writes a synthetic dataset of this spec (the keyword
            arguments of the format's `synthesize`) at `root` on first use.
        class_weights: per-class loss weights (DeepCAM: MLPerf-HPC's), None for uniform.
    """

    format: str
    root: Path
    options: DatasetOptions = DatasetOptions()
    synthesize: dict | None = None
    class_weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class RunConfig:
    shuffle: str
    q: float
    dataset: DatasetConfig
    model: str
    epochs: int
    batch_size: int
    seed: int
    optim: OptimConfig
    local_dir: Path
    stage: bool
    replica: bool
    stage_threads: int
    max_bytes: int | None
    loader_workers: int
    exchange_timeout_s: float
    device: str
    threads: int
    audit: bool
    progress: bool
    on_error: str = "fail"
    resume: str = "auto"
    checkpoint_every_epochs: int = 1
    checkpoint_every_steps: int = 0
    model_options: dict = field(default_factory=dict)
    label_smoothing: float = 0.0
    precision: str = "fp32"
    channels_last: bool = False
    wandb: bool = False
    wandb_project: str = "hpcshuffle"
    loan_ahead: int = 4  # shuffle=locality: steps a loan is sent before its step
    io_threads: int = 1  # per loader process: threads reading a batch's samples (fetch.py)
    decode_threads: int = 0  # per loader process: threads decoding them (0: the loader's own thread)
    cache_policy: str = "none"  # shuffle=global: a planned cache of shared-storage reads (node_cache.py)
    cache_samples: int | None = None  # per rank; None: a quarter of what a rank reads per epoch
    virtual_workers: int = 0  # >0: one process trains as synchronous SGD over this many workers (simulate.py)
    virtual_chunk: int = 0  # virtual workers per forward/backward pass; 0: all of them
    step_loss: bool = False  # metrics.jsonl: also each step's loss (mean over workers)

    def __post_init__(self) -> None:
        if self.shuffle not in STRATEGIES:
            raise ConfigError(f"shuffle must be one of {sorted(STRATEGIES)}, got {self.shuffle!r}")
        if not 0.0 <= self.q <= 1.0:
            raise ConfigError(f"shuffle.q must be in [0, 1], got {self.q}")
        try:
            get_strategy(self.shuffle).q_for(self.q)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if self.replica and self.shuffle != "global":
            raise ConfigError(
                f"storage.replica=true keeps a full replica per node for shuffle=global; "
                f"shuffle={self.shuffle} stages only each rank's partition: drop storage.replica"
            )
        if self.cache_policy != "none":
            if self.cache_policy not in POLICIES:
                raise ConfigError(f"cache.policy must be 'none' or one of {sorted(POLICIES)}, got {self.cache_policy!r}")
            if self.shuffle != "global" or self.replica:
                raise ConfigError(
                    f"cache.policy={self.cache_policy} caches reads from shared storage, which only shuffle=global "
                    f"without storage.replica makes; shuffle={self.shuffle} reads node-local copies already: "
                    "set cache.policy=none"
                )
            if self.cache_samples is not None and self.cache_samples < 1:
                raise ConfigError(f"cache.samples must be >= 1 or null (a quarter of a rank's reads), got {self.cache_samples}")
        self._check_virtual()
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ConfigError(f"storage.max_gib must be > 0 or null, got {self.max_bytes / 2**30:g}")
        for name, key in (("epochs",) * 2, ("batch_size",) * 2, ("threads",) * 2, ("stage_threads", "storage.threads")):
            if getattr(self, name) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, name)}")
        if self.loader_workers < 0:
            raise ConfigError(f"loader.workers must be >= 0, got {self.loader_workers}")
        if self.io_threads < 1 or self.decode_threads < 0:
            raise ConfigError(
                f"loader.io_threads must be >= 1 and loader.decode_threads >= 0, got {self.io_threads} and "
                f"{self.decode_threads}"
            )
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.on_error not in ("fail", "skip"):
            raise ConfigError(f"loader.on_error must be 'fail' or 'skip', got {self.on_error!r}")
        if self.resume not in ("auto", "require"):
            raise ConfigError(
                f"checkpoint.resume must be 'auto' (continue if the run directory has a checkpoint) or "
                f"'require' (fail without one), got {self.resume!r}"
            )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"loss.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.loan_ahead < 1:
            raise ConfigError(f"shuffle.ahead must be >= 1 (steps a loan is sent early), got {self.loan_ahead}")
        for name in ("checkpoint_every_epochs", "checkpoint_every_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name.replace('_', '.', 1)} must be >= 0 (0: off), got {getattr(self, name)}")

    def _check_virtual(self) -> None:
        if self.virtual_workers < 0 or self.virtual_chunk < 0:
            raise ConfigError(
                f"shuffle.virtual_workers and shuffle.virtual_chunk must be >= 0 (0: off), got "
                f"{self.virtual_workers} and {self.virtual_chunk}"
            )
        if not self.virtual_workers:
            if self.virtual_chunk:
                raise ConfigError("shuffle.virtual_chunk only applies with shuffle.virtual_workers=M; set both or neither")
            return
        if self.on_error != "fail":
            raise ConfigError(
                "shuffle.virtual_workers normalises each virtual worker's whole local batch, which a skipped "
                "sample would break: set loader.on_error=fail"
            )
        if self.cache_policy != "none" or self.replica:
            raise ConfigError(
                "shuffle.virtual_workers simulates the training, not the I/O: it reads shared storage directly; "
                "set cache.policy=none and storage.replica=false"
            )

    @classmethod
    def from_hydra(cls, cfg: DictConfig) -> RunConfig:
        try:
            return cls._from_hydra(cfg)
        except ValueError as err:  # a component's own check (OptimConfig, DatasetOptions)
            raise ConfigError(str(err)) from None

    @classmethod
    def _from_hydra(cls, cfg: DictConfig) -> RunConfig:
        synth = cfg.dataset.get("synthesize")
        weights = cfg.dataset.get("class_weights")
        image_size = cfg.dataset.get("image_size")
        optim = OmegaConf.to_container(cfg.optim, resolve=True)
        for key in ("milestones", "betas"):
            if key in optim:
                optim[key] = tuple(optim[key])
        model_options = OmegaConf.to_container(cfg.model, resolve=True)
        return cls(
            shuffle=cfg.shuffle.name,
            q=float(cfg.shuffle.q),
            dataset=DatasetConfig(
                format=cfg.dataset.format,
                root=Path(cfg.dataset.root),
                options=DatasetOptions(cfg.dataset.get("augment", "standard"),
                                       None if image_size is None else int(image_size)),
                synthesize=OmegaConf.to_container(synth, resolve=True) if synth else None,
                class_weights=tuple(float(w) for w in weights) if weights else None,
            ),
            model=model_options.pop("name"),
            model_options=model_options,
            epochs=int(cfg.epochs),
            batch_size=int(cfg.batch_size),
            seed=int(cfg.seed),
            optim=OptimConfig(**known_keys(optim, OptimConfig, "optim")),
            local_dir=Path(cfg.storage.local_dir),
            stage=bool(cfg.storage.stage),
            replica=bool(cfg.storage.replica),
            stage_threads=int(cfg.storage.threads),
            max_bytes=None if cfg.storage.max_gib is None else int(float(cfg.storage.max_gib) * 2**30),
            loader_workers=int(cfg.loader.workers),
            exchange_timeout_s=float(cfg.exchange.timeout_s),
            device=cfg.device,
            threads=int(cfg.threads),
            audit=bool(cfg.audit),
            progress=bool(cfg.progress) and sys.stderr.isatty(),  # logs get the epoch table only
            on_error=cfg.loader.on_error,
            resume=cfg.checkpoint.resume,
            checkpoint_every_epochs=int(cfg.checkpoint.every_epochs),
            checkpoint_every_steps=int(cfg.checkpoint.every_steps),
            label_smoothing=float(cfg.loss.label_smoothing),
            precision=cfg.precision,
            channels_last=bool(cfg.channels_last),
            wandb=bool(cfg.logger.wandb),
            wandb_project=cfg.logger.project,
            loan_ahead=int(cfg.shuffle.get("ahead", 4)),
            io_threads=int(cfg.loader.io_threads),
            decode_threads=int(cfg.loader.decode_threads),
            cache_policy=str(cfg.cache.policy),
            cache_samples=None if cfg.cache.samples is None else int(cfg.cache.samples),
            virtual_workers=int(cfg.shuffle.virtual_workers),
            virtual_chunk=int(cfg.shuffle.virtual_chunk),
            step_loss=bool(cfg.logger.step_loss),
        )


def known_keys(settings: dict, typed, group: str) -> dict:
    """`settings`, after checking that each key is a field of the dataclass `typed` (typos fail)."""
    fields = set(typed.__dataclass_fields__)
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise ConfigError(f"{group}.{unknown[0]} is not a setting of {group}; known: {', '.join(sorted(fields))}")
    return settings


def resolved_yaml(cfg: DictConfig) -> str:
    """The run's config as YAML, every interpolation resolved (what ranks must agree on)."""
    return OmegaConf.to_yaml(cfg, resolve=True, sort_keys=True)
