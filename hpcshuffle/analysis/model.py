"""Epoch-time model of data loading: Yang & Cong (2019), §IV eqs. 1–7 and §V-C eq. 8.

Loading overlaps training, so an epoch costs the larger of the training time (1) and the
data-loading time (4) = sample I/O + preprocessing. The three methods differ only in the sample
I/O term: regular loading reads every sample from storage (2); distributed caching reads the
cached fraction α from remote caches (7); locality-aware loading trains on what each node caches
and moves only the balancing fraction β (8). Times are seconds per epoch; rates count samples
per second.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from hpcshuffle.analysis.imbalance import median_imbalance_pct
from hpcshuffle.errors import at_least

METHODS = ("regular", "cache", "locality")

# β from the simulation: one epoch of 64 global batches per node count is plenty for a median
# that only has to set a small term, and beyond 1024 nodes it no longer depends on p (Fig. 6)
BETA_STEPS = 64
BETA_MAX_NODES = 1024

RATES = {
    "train_samples_per_s": "training rate V (samples/s per node)",
    "io_samples_per_s": "storage rate R (samples/s)",
    "preprocess_samples_per_s": "preprocessing rate U (samples/s per node)",
    "cache_samples_per_s": "remote-cache rate Rc (samples/s)",
    "balance_samples_per_s": "balancing rate Rb (samples/s)",
}


@dataclass(frozen=True)
class ModelParams:
    """The model's constants (§IV, §V-C).

    Args:
        num_samples: D, samples in the dataset (taken to be of equal size).
        train_samples_per_s: V, the training rate of one compute node.
        io_samples_per_s: R, what the storage system delivers to all nodes together.
        preprocess_samples_per_s: U, the decode + augment rate of one compute node.
        cached_fraction: α, the fraction of the dataset the nodes' caches hold together.
        cache_samples_per_s: Rc, the rate of reads from remote caches; it does not grow with p.
        balance_samples_per_s: Rb, the rate of load-balancing transfers; None: Rc (balancing
            reads from remote caches).
        balance_fraction: β, the fraction of the dataset moved per epoch to balance the nodes;
            None: simulate it per node count (`predict`).
    """

    num_samples: int
    train_samples_per_s: float
    io_samples_per_s: float
    preprocess_samples_per_s: float
    cached_fraction: float = 1.0
    cache_samples_per_s: float = 200_000.0
    balance_samples_per_s: float | None = None
    balance_fraction: float | None = None

    def __post_init__(self) -> None:
        at_least("dataset size D", self.num_samples, 1, "sample")
        for field_name, label in RATES.items():
            rate = getattr(self, field_name)
            if rate is not None and not (rate > 0 and math.isfinite(rate)):
                raise ValueError(f"{label} must be a positive finite number, got {rate}")
        if not 0.0 <= self.cached_fraction <= 1.0:
            raise ValueError(f"cached fraction α must be in [0, 1], got {self.cached_fraction}")
        if self.balance_fraction is not None and not 0.0 <= self.balance_fraction <= 1.0:
            raise ValueError(f"balancing fraction β must be in [0, 1], got {self.balance_fraction}")

    @property
    def balance_rate(self) -> float:
        """Rb, or Rc where Rb is not given."""
        if self.balance_samples_per_s is None:
            return self.cache_samples_per_s
        return self.balance_samples_per_s


# A plausible ImageNet-1k / ResNet-50 run on a parallel file system, close to the paper's Lassen
# nodes (§VI: 4 V100 GPUs, 44 cores, GPFS, InfiniBand EDR). Regular loading is then training-bound
# on 16 nodes and storage-bound on 32 (R/V = 20), as the paper's Fig. 12 measured.
IMAGENET_PFS = ModelParams(
    num_samples=1_281_167,  # ImageNet-1k training images, ~110 KB JPEGs
    train_samples_per_s=1_000.0,  # ResNet-50 on 4 V100s, ~250 images/s each with gradient allreduce
    io_samples_per_s=20_000.0,  # ~2.2 GB/s of small-file reads from the shared file system
    preprocess_samples_per_s=6_000.0,  # JPEG decode + augment on 44 cores, ~140 images/s each
    cached_fraction=1.0,  # the nodes' memory together holds the 150 GB after the first epoch
    cache_samples_per_s=200_000.0,  # ~22 GB/s of remote-cache reads over the interconnect
)


def check_nodes(num_nodes: int) -> None:
    """ValueError unless p, the number of nodes, is at least 1."""
    at_least("number of nodes p", num_nodes)


def training_time_s(params: ModelParams, num_nodes: int) -> float:
    """Eq. (1): D / (p·V)."""
    check_nodes(num_nodes)
    return params.num_samples / (num_nodes * params.train_samples_per_s)


def sample_io_time_s(params: ModelParams) -> float:
    """Eq. (2): D / R, the same for every p: the storage system does not scale with the job."""
    return params.num_samples / params.io_samples_per_s


def preprocessing_time_s(params: ModelParams, num_nodes: int) -> float:
    """Eq. (3): D / (p·U)."""
    check_nodes(num_nodes)
    return params.num_samples / (num_nodes * params.preprocess_samples_per_s)


def loading_time_s(params: ModelParams, num_nodes: int) -> float:
    """Eq. (4): (2) + (3) = D/R + D/(p·U)."""
    return sample_io_time_s(params) + preprocessing_time_s(params, num_nodes)


def true_cost_s(params: ModelParams, num_nodes: int) -> float:
    """Eq. (6) with preprocessing kept: max((1), (4)), since loading overlaps training.

    With U ≫ V this is the paper's D/(p·V) for p ≤ R/V and D/R beyond.
    """
    return max(training_time_s(params, num_nodes), loading_time_s(params, num_nodes))


def crossover_nodes(params: ModelParams) -> float:
    """Eq. (5): training dominates sample I/O up to p = R/V nodes."""
    return params.io_samples_per_s / params.train_samples_per_s


def cache_io_parts_s(params: ModelParams, num_nodes: int) -> dict[str, float]:
    """Eq. (7)'s terms: (1−α)·D/R from storage and α·D/Rc·(p−1)/p from remote caches."""
    check_nodes(num_nodes)
    alpha, samples = params.cached_fraction, params.num_samples
    return {
        "storage": (1 - alpha) * samples / params.io_samples_per_s,
        "remote cache": alpha * samples / params.cache_samples_per_s * (num_nodes - 1) / num_nodes,
    }


def cache_io_time_s(params: ModelParams, num_nodes: int) -> float:
    """Eq. (7): sample I/O time with distributed caching."""
    return sum(cache_io_parts_s(params, num_nodes).values())


def locality_io_parts_s(params: ModelParams, balance_fraction: float) -> dict[str, float]:
    """Eq. (8)'s terms: (1−α)·D/R from storage and α·D/Rb·β for balancing."""
    alpha, samples = params.cached_fraction, params.num_samples
    return {
        "storage": (1 - alpha) * samples / params.io_samples_per_s,
        "balancing": alpha * samples / params.balance_rate * balance_fraction,
    }


def locality_io_time_s(params: ModelParams, balance_fraction: float) -> float:
    """Eq. (8): sample I/O time with locality-aware loading."""
    return sum(locality_io_parts_s(params, balance_fraction).values())


def simulated_balance_fraction(batch_size: int, num_nodes: int, seed: int = 0) -> float:
    """β for local batch b on p nodes: the median simulated imbalance (Fig. 6) as a fraction."""
    check_nodes(num_nodes)
    if num_nodes == 1:
        return 0.0  # a single cache holds every sample of every batch
    nodes = min(num_nodes, BETA_MAX_NODES)
    return median_imbalance_pct(batch_size, nodes, BETA_STEPS, seed, batches_per_epoch=BETA_STEPS) / 100


@dataclass(frozen=True)
class MethodTime:
    """One loading method's epoch: its sample I/O time and what bounds the epoch."""

    io_s: float
    epoch_s: float  # max(training, sample I/O + preprocessing)
    dominant: str  # "training", "preprocessing", or the largest sample-I/O term


@dataclass(frozen=True)
class EpochPrediction:
    """The predicted epoch of every method on p nodes."""

    num_nodes: int
    training_s: float
    preprocessing_s: float
    balance_fraction: float  # β used for the locality-aware method
    regular: MethodTime
    cache: MethodTime
    locality: MethodTime


def method_time(training_s: float, preprocessing_s: float, io_parts_s: dict[str, float]) -> MethodTime:
    """Overlapped loading: the epoch is the larger of training and loading; name the bound."""
    io_s = sum(io_parts_s.values())
    loading_s = io_s + preprocessing_s
    if training_s >= loading_s:
        dominant = "training"
    else:
        # loading bounds the epoch: name its largest part, the one worth speeding up
        dominant = max({**io_parts_s, "preprocessing": preprocessing_s}.items(), key=lambda item: item[1])[0]
    return MethodTime(io_s=io_s, epoch_s=max(training_s, loading_s), dominant=dominant)


def predict(params: ModelParams, node_counts: list[int], batch_size: int = 32, seed: int = 0) -> list[EpochPrediction]:
    """Predicted epoch times on each node count for regular, distributed-cache and locality-aware loading.

    Args:
        params: the model's constants; where `balance_fraction` is None, β is simulated.
        node_counts: p values.
        batch_size: b, the local batch; only used to simulate β.
        seed: the simulation's seed.

    Returns:
        One prediction per node count, in the order given.
    """
    for num_nodes in node_counts:
        check_nodes(num_nodes)
    at_least("local batch size b", batch_size)
    predictions = []
    for num_nodes in node_counts:
        training_s = training_time_s(params, num_nodes)
        preprocessing_s = preprocessing_time_s(params, num_nodes)
        beta = params.balance_fraction
        if beta is None:
            beta = simulated_balance_fraction(batch_size, num_nodes, seed)
        predictions.append(EpochPrediction(
            num_nodes=num_nodes,
            training_s=training_s,
            preprocessing_s=preprocessing_s,
            balance_fraction=beta,
            regular=method_time(training_s, preprocessing_s, {"storage": sample_io_time_s(params)}),
            cache=method_time(training_s, preprocessing_s, cache_io_parts_s(params, num_nodes)),
            locality=method_time(training_s, preprocessing_s, locality_io_parts_s(params, beta)),
        ))
    return predictions


def describe(params: ModelParams, batch_size: int) -> str:
    """The parameters in the paper's symbols, on one line."""
    rb = "Rc" if params.balance_samples_per_s is None else f"{params.balance_samples_per_s:g}/s"
    beta = (f"simulated for b = {batch_size} (median imbalance)" if params.balance_fraction is None
            else f"{params.balance_fraction:g}")
    return (
        f"D = {params.num_samples} samples, V = {params.train_samples_per_s:g}/s per node, "
        f"R = {params.io_samples_per_s:g}/s, U = {params.preprocess_samples_per_s:g}/s per node, "
        f"α = {params.cached_fraction:g}, Rc = {params.cache_samples_per_s:g}/s, Rb = {rb}, β {beta}"
    )


def model_table(params: ModelParams, predictions: list[EpochPrediction], batch_size: int) -> str:
    """One row per node count: epoch seconds of each method and the term that bounds it."""
    lines = [
        describe(params, batch_size),
        f"training (1) dominates regular loading up to p = R/V = {crossover_nodes(params):.1f} nodes (5); "
        f"sample I/O from storage (2) = D/R = {sample_io_time_s(params):.1f} s at any p",
        f"{'nodes':>5} {'train s':>9} {'regular s':>9} {'bound':<13} {'cache s':>9} {'bound':<13} "
        f"{'locality s':>10} {'bound':<13} {'β':>6}",
    ]
    for row in predictions:
        lines.append(
            f"{row.num_nodes:>5} {row.training_s:>9.1f} "
            f"{row.regular.epoch_s:>9.1f} {row.regular.dominant:<13} "
            f"{row.cache.epoch_s:>9.1f} {row.cache.dominant:<13} "
            f"{row.locality.epoch_s:>10.1f} {row.locality.dominant:<13} {row.balance_fraction:>6.4f}"
        )
    return "\n".join(lines)


def model_json(params: ModelParams, predictions: list[EpochPrediction], batch_size: int) -> str:
    """The parameters, the crossover p = R/V and, per node count, every method's times."""
    rows = [
        {
            "nodes": row.num_nodes,
            "training_s": row.training_s,
            "preprocessing_s": row.preprocessing_s,
            "beta": row.balance_fraction,
            **{method: asdict(getattr(row, method)) for method in METHODS},
        }
        for row in predictions
    ]
    doc = {
        "params": {**asdict(params), "balance_samples_per_s": params.balance_rate},
        "batch": batch_size,
        "crossover_nodes": crossover_nodes(params),
        "predictions": rows,
    }
    return json.dumps(doc)
