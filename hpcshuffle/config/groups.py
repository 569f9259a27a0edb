"""One typed, checked dataclass per Hydra config group (`conf/<group>/*.yaml`).

Each is registered in Hydra's ConfigStore as `<group>/schema` (config/__init__.py) and every
yaml of the group starts from it (`defaults: [schema, _self_]`), so a misspelt key or a value of
the wrong type fails when Hydra composes the config, and a value out of range fails here, in
`__post_init__`, with the setting's name and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hpcshuffle.errors import ConfigError, at_least, positive
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.plan import STRATEGIES, Strategy, check_partition, get_strategy

SCOPES = ("auto", "node", "rank")
UNITS = ("sample", "shard")
# how a run reads shared storage (storage/shared_io.py): dropping each file from the page cache, or not
UNCACHED, CACHED = "uncached", "cached"
SHARED_READS = (UNCACHED, CACHED)
# the planned caches of shared reads (storage/cache.py: POLICIES, one class per name)
CACHE_POLICIES = ("lru", "nopfs", "reuse_count", "reuse_distance")


@dataclass
class ShuffleConfig:
    """`conf/shuffle/`: the strategy, its q, and the virtual-worker simulation.

    Attributes:
        ahead: locality-aware loading: steps a loan is sent before its step.
        virtual_workers: > 0: one process trains as synchronous SGD over this many workers.
        virtual_chunk: virtual workers per forward/backward pass; 0: all of them.
        unit: "sample", or "shard": the plan partitions and exchanges whole shards of a packed
            dataset (plan/shards.py), with shard j holding ids [jG, (j+1)G).
        buffer: B > 0: each epoch a node reads its shards in a shuffled order, each one in order,
            through a shuffle buffer of B samples; 0: a full shuffle of what the node holds. For a
            strategy that reads blocks: CorgiPile's buffer (0: ten blocks), Streaming's shuffle
            block (0: Streaming's default).
        block: G, samples per block for a strategy that reads shared storage in blocks of
            consecutive ids (CorgiPile's blocks, Streaming's shards); a packed dataset's shards with
            shuffle.unit=shard.
    """

    name: str = "local"
    q: float = 0.0
    ahead: int = 4
    virtual_workers: int = 0
    virtual_chunk: int = 0
    unit: str = "sample"
    buffer: int = 0
    block: int = 0

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ConfigError(f"shuffle must be one of {sorted(STRATEGIES)}, got {self.name!r}")
        if self.unit not in UNITS:
            raise ConfigError(f"shuffle.unit must be one of {UNITS}, got {self.unit!r}")
        at_least("shuffle.buffer", self.buffer, 0, "samples (0: a full shuffle)", error=ConfigError)
        if (self.unit == "shard" or self.buffer) and not (self.strategy.local_order or self.strategy.blocks):
            raise ConfigError(
                f"shuffle.unit=shard and shuffle.buffer shape the partition and the order a node reads its "
                f"own samples in, but shuffle={self.name} trains on global batches: use shuffle=local or partial"
            )
        if self.strategy.blocks and self.unit != "shard":
            at_least("shuffle.block", self.block, 1, f"samples (shuffle={self.name} reads blocks of them)",
                     error=ConfigError)
        elif self.block and not self.strategy.blocks:
            blocked = [name for name, strategy in STRATEGIES.items() if strategy.blocks]
            raise ConfigError(f"shuffle.block only applies to the strategies that read blocks ({', '.join(blocked)}); "
                              f"shuffle={self.name} does not: drop shuffle.block")
        if not 0.0 <= self.q <= 1.0:
            raise ConfigError(f"shuffle.q must be in [0, 1], got {self.q}")
        try:
            get_strategy(self.name).q_for(self.q)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        at_least("shuffle.ahead", self.ahead, 1, "(steps a loan is sent early)", error=ConfigError)
        at_least("shuffle.virtual_workers", self.virtual_workers, 0, "(0: off)", error=ConfigError)
        at_least("shuffle.virtual_chunk", self.virtual_chunk, 0, "(0: all of them)", error=ConfigError)
        if self.virtual_chunk and not self.virtual_workers:
            raise ConfigError("shuffle.virtual_chunk only applies with shuffle.virtual_workers=M; set both or neither")

    @property
    def strategy(self) -> Strategy:
        """The strategy record of `name` (plan/strategies.py)."""
        return get_strategy(self.name)


@dataclass
class DatasetConfig:
    """`conf/dataset/`: which format, where, and how to decode it.

    Attributes:
        synthesize: when set, rank 0 writes a synthetic dataset of this spec (the keyword
            arguments of the format's `synthesize`) at `root` on first use; its `seed`, when
            given, draws the images (default: the run's seed), so runs of several seeds can
            train on one dataset.
        class_weights: per-class loss weights (DeepCAM: MLPerf-HPC's), None for uniform.
    """

    format: str = "imagefolder"
    root: Path = Path("data/synthetic")
    augment: str = "standard"
    image_size: Optional[int] = None
    synthesize: Optional[dict[str, Any]] = None
    class_weights: Optional[list[float]] = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        try:
            self.options = DatasetOptions(self.augment, self.image_size)
        except ValueError as err:
            raise ConfigError(str(err)) from None


@dataclass
class StorageConfig:
    """`conf/storage/`: the node-local stores (docs/staging.md, "Staging") and how shared storage
    is read (docs/staging.md, "Shared storage").

    Attributes:
        stage: copy what is missing or stale before training; False: fail unless staged.
        replica: global shuffling reads a full replica per node instead of shared storage.
        max_gib: cap on what this job's ranks may use per node; None: the free space.
        shared_dir: the mount of the shared file system; a relative dataset.root lies under it,
            and the run checks it is mounted before reading or writing there. None: dataset.root
            as it is.
        shared_reads: "uncached" (each shared read drops the file from the page cache) or
            "cached" (shared_io.py).
        scope: "node" (the ranks of a node share its partition: each epoch deals the node's samples
            to its ranks afresh, and an exchange moves samples only between nodes), "rank" (each
            rank its own partition), or "auto": node where the job spans several nodes of several
            ranks each, rank on one node (where node scope would leave nothing to exchange).
        ranks_per_node: pretend every node runs this many ranks (consecutive ranks, one machine
            seen as several nodes, for tests and demos); None: the nodes MPI reports.
        partition: how the first partition is cut: "random" (a seeded shuffle of the sample ids)
            or "contiguous" (consecutive id ranges, as a stager that hands each node a range of the
            listing would; ImageFolder's ids run class by class, so each rank starts with a few classes),
            or a label-skewed split: "dirichlet-α" or "classes_per_worker-k" (plan/skew.py).
    """

    local_dir: Path = Path("/tmp/hpcshuffle-store")
    stage: bool = True
    threads: int = 8
    replica: bool = False
    max_gib: Optional[float] = None
    shared_dir: Optional[Path] = None
    shared_reads: str = UNCACHED
    scope: str = "auto"
    ranks_per_node: Optional[int] = None
    partition: str = "random"

    def __post_init__(self) -> None:
        self.local_dir = Path(self.local_dir)
        try:
            check_partition(self.partition)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        if self.scope not in SCOPES:
            raise ConfigError(f"storage.scope must be one of {SCOPES}, got {self.scope!r}")
        if self.ranks_per_node is not None:
            at_least("storage.ranks_per_node", self.ranks_per_node, error=ConfigError)
        self.shared_dir = None if self.shared_dir is None else Path(self.shared_dir)
        at_least("storage.threads", self.threads, error=ConfigError)
        if self.max_gib is not None:
            positive("storage.max_gib", self.max_gib, "or null", error=ConfigError)
        if self.shared_reads not in SHARED_READS:
            raise ConfigError(f"storage.shared_reads must be one of {SHARED_READS}, got {self.shared_reads!r}")

    @property
    def max_bytes(self) -> int | None:
        """`max_gib` in bytes; None: no limit."""
        return None if self.max_gib is None else int(self.max_gib * 2**30)


@dataclass
class LoaderConfig:
    """`conf/loader/`: DataLoader processes, the threads of the unordered fetcher (fetch.py), and
    where training JPEGs are decoded.

    Attributes:
        decode: "cpu" (the loader's workers decode and augment) or "gpu" (they read bytes; the
            training process decodes on its device, storage/device_decode.py).
        gpu_fraction: with decode=gpu, the share of each batch decoded on the device; the workers
            decode the rest.
    """

    workers: int = 0
    io_threads: int = 1
    decode_threads: int = 0
    on_error: str = "fail"
    decode: str = "cpu"
    gpu_fraction: float = 1.0

    def __post_init__(self) -> None:
        at_least("loader.workers", self.workers, 0, error=ConfigError)
        at_least("loader.io_threads", self.io_threads, error=ConfigError)
        at_least("loader.decode_threads", self.decode_threads, 0, error=ConfigError)
        if self.on_error not in ("fail", "skip"):
            raise ConfigError(f"loader.on_error must be 'fail' or 'skip', got {self.on_error!r}")
        if self.decode not in ("cpu", "gpu"):
            raise ConfigError(f"loader.decode must be 'cpu' (loader workers) or 'gpu' (the training device), "
                              f"got {self.decode!r}")
        if not 0.0 <= self.gpu_fraction <= 1.0:
            raise ConfigError(f"loader.gpu_fraction must be in [0, 1] (the share of a batch decoded on the "
                              f"device), got {self.gpu_fraction}")

    @property
    def raw_fraction(self) -> float:
        """The share of a training batch the workers leave encoded (0 unless decode=gpu)."""
        return self.gpu_fraction if self.decode == "gpu" else 0.0


@dataclass
class CacheConfig:
    """`conf/cache/`: a planned cache of shared-storage reads on node-local disk (node_cache.py).

    Attributes:
        samples: per rank; None: a quarter of what a rank reads per epoch.
    """

    policy: str = "none"
    samples: Optional[int] = None

    def __post_init__(self) -> None:
        if self.policy != "none" and self.policy not in CACHE_POLICIES:
            raise ConfigError(f"cache.policy must be 'none' or one of {sorted(CACHE_POLICIES)}, got {self.policy!r}")
        if self.policy != "none" and self.samples is not None:
            at_least("cache.samples", self.samples, 1, "or null (a quarter of a rank's reads)", error=ConfigError)

    @property
    def enabled(self) -> bool:
        """Whether a planned cache is on (a policy other than "none")."""
        return self.policy != "none"


@dataclass
class CheckpointConfig:
    """`conf/checkpoint/`: <run dir>/checkpoint.pt (docs/reliability.md)."""

    resume: str = "auto"
    every_epochs: int = 1
    every_steps: int = 0

    def __post_init__(self) -> None:
        if self.resume not in ("auto", "require"):
            raise ConfigError(
                f"checkpoint.resume must be 'auto' (continue if the run directory has a checkpoint) or "
                f"'require' (fail without one), got {self.resume!r}"
            )
        for name in ("every_epochs", "every_steps"):
            at_least(f"checkpoint.{name}", getattr(self, name), 0, "(0: off)", error=ConfigError)


@dataclass
class LoggerConfig:
    """`conf/logger/`: metrics.jsonl always; wandb in addition; per-step losses on request."""

    wandb: bool = False
    step_loss: bool = False
    project: str = "hpcshuffle"


@dataclass
class WorldConfig:
    """The job's ranks as a whole (docs/reliability.md).

    Attributes:
        timeout_s: how long a rank waits on its peers without progress — in a torch.distributed
            collective (the gradient allreduce), an exchange, a loan, staging from peers — before
            it ends the job naming the rank that did not answer, with an exit code a job script
            requeues on (checkpoint.PEER_LOST_EXIT_CODE).
    """

    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        positive("world.timeout_s", self.timeout_s, "seconds (how long a rank waits on a silent peer)",
                 error=ConfigError)


@dataclass
class LossConfig:
    """The training loss's options (`label_smoothing`: classification only, in [0, 1))."""

    label_smoothing: float = 0.0  # classification only

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"loss.label_smoothing must be in [0, 1), got {self.label_smoothing}")


NORMS = ("worker", "global")  # where BatchNorm takes its statistics (training/norm.py)


@dataclass
class ModelConfig:
    """`conf/model/`: the network's name and its keyword options (each model checks its own;
    `weights`, a state dict to start from, is the runner's). `norm`: where BatchNorm takes its
    statistics, each worker's own local batch (`worker`, what data-parallel training does) or the
    global batch of the step (`global`, statistics all-reduced across the workers)."""

    name: str
    options: dict = field(default_factory=dict)
    norm: str = "worker"

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ConfigError(f"model.norm={self.norm!r} is not known: 'worker' (BatchNorm over each worker's "
                              "own batch) or 'global' (over the step's global batch, all-reduced across workers)")
