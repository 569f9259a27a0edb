"""Load imbalance of locality-aware loading: Yang & Cong (2019), §V-C and Fig. 6.

A dataset is evenly partitioned over the caches of p nodes. Global shuffling draws global
mini-batches of p·b samples as consecutive slices of one permutation per epoch. With
locality-aware loading every node trains on the samples of the batch that its cache holds, so
node r starts a step with counts[r] samples instead of b. The imbalance of a step is the volume
balancing must move, Σ_r max(b − counts[r], 0), as a percentage of the global batch p·b; the
transfers that move it come from Algorithm 1 (`hpcshuffle.plan.balance`), at most p − 1 per step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcshuffle.errors import at_least
from hpcshuffle.plan.balance import balance

# N = 256·p·b: sampling without replacement within an epoch then shrinks the per-node count
# variance by only 1 − 1/256, as for a real dataset much larger than a global batch, while
# one permutation stays cheap (8.4 M ids for p = 256, b = 128).
BATCHES_PER_EPOCH = 256
# two epochs: medians then move by at most ~0.2 % between seeds (one sample of 512 for p = 16,
# b = 32); one epoch lets them drift by 0.4 %
DEFAULT_STEPS = 512
MAX_SAMPLES = 2**27  # the epoch permutation alone takes 1 GiB here

# The stream id leads the key because SeedSequence pads entropy with zeros: [seed, p, b] and
# [seed, p, b, 0] would give the same generator, i.e. epoch 0's order would equal the partition.
STREAM_PARTITION = 0
STREAM_EPOCH = 1


def dataset_size(batch_size: int, num_nodes: int, batches_per_epoch: int = BATCHES_PER_EPOCH) -> int:
    """N, the simulated dataset: `batches_per_epoch` global batches of p·b samples."""
    return batches_per_epoch * num_nodes * batch_size


def check_shape(batch_size: int, num_nodes: int, num_steps: int, batches_per_epoch: int) -> None:
    """Raise ValueError naming the first argument that is not a positive integer, or a dataset too large."""
    for name, value in (
        ("local batch size b", batch_size),
        ("number of nodes p", num_nodes),
        ("number of steps", num_steps),
        ("global batches per epoch", batches_per_epoch),
    ):
        at_least(name, value)
    num_samples = dataset_size(batch_size, num_nodes, batches_per_epoch)
    if num_samples > MAX_SAMPLES:
        raise ValueError(
            f"simulating p = {num_nodes} nodes with b = {batch_size} needs a dataset of "
            f"{batches_per_epoch}·p·b = {num_samples} samples, more than {MAX_SAMPLES}; "
            "use fewer nodes or a smaller batch (the median hardly changes with p beyond a few hundred nodes)"
        )


def cache_directory(num_samples: int, num_nodes: int, seed: int, batch_size: int) -> np.ndarray:
    """The node whose cache holds each sample: a seeded random partition into equal parts.

    Returns:
        int32 array (num_samples,) of node ids; every id occurs num_samples / num_nodes times.
    """
    rng = np.random.default_rng([seed, STREAM_PARTITION, num_nodes, batch_size])
    # int32 halves the memory traffic of the per-epoch lookups; node ids stay far below 2**31
    return rng.permutation(np.arange(num_samples, dtype=np.int32) % num_nodes)


def batch_counts(
    batch_size: int,
    num_nodes: int,
    num_steps: int = DEFAULT_STEPS,
    seed: int = 0,
    batches_per_epoch: int = BATCHES_PER_EPOCH,
) -> np.ndarray:
    """How many samples of each step's global batch every node's cache holds.

    Args:
        batch_size: b, the samples a node trains on per step.
        num_nodes: p, nodes (caches).
        num_steps: steps to simulate; consecutive epochs are drawn as needed.
        seed: the seed of the partition and of every epoch's permutation.
        batches_per_epoch: global batches per epoch; the dataset is this many times p·b.

    Returns:
        int64 array (num_steps, num_nodes); every row sums to p·b.
    """
    check_shape(batch_size, num_nodes, num_steps, batches_per_epoch)
    at_least("seed", seed, 0)
    num_samples = dataset_size(batch_size, num_nodes, batches_per_epoch)
    node_of = cache_directory(num_samples, num_nodes, seed, batch_size)
    global_batch = num_nodes * batch_size
    counts = []
    for epoch in range(-(-num_steps // batches_per_epoch)):
        steps = min(batches_per_epoch, num_steps - epoch * batches_per_epoch)
        rng = np.random.default_rng([seed, STREAM_EPOCH, epoch, num_nodes, batch_size])
        order = rng.permutation(num_samples)[: steps * global_batch]
        batches = node_of[order].reshape(steps, global_batch)
        counts.extend(np.bincount(batch, minlength=num_nodes) for batch in batches)
    return np.stack(counts).astype(np.int64, copy=False)


def imbalance_pct(counts: np.ndarray, batch_size: int) -> np.ndarray:
    """Per step, Σ deficits against b as a percentage of the global batch p·b.

    Args:
        counts: int array (steps, p) from `batch_counts`.
        batch_size: b.

    Returns:
        float64 array (steps,), each in [0, 100).
    """
    deficits = np.maximum(batch_size - counts, 0).sum(axis=1)
    return deficits * 100.0 / (counts.shape[1] * batch_size)


def transfer_counts(counts: np.ndarray, batch_size: int) -> np.ndarray:
    """Per step, how many (source, destination) transfers Algorithm 1 schedules.

    Returns:
        int64 array (steps,), each at most p − 1.
    """
    targets = np.full(counts.shape[1], batch_size, dtype=np.int64)
    return np.array([len(balance(row, targets)) for row in counts], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ImbalanceResult:
    """The simulated steps of one (local batch b, nodes p)."""

    batch_size: int
    num_nodes: int
    num_samples: int
    imbalance_pct: np.ndarray  # float64 (steps,)
    transfers: np.ndarray  # int64 (steps,)

    @property
    def median_pct(self) -> float:
        """The median step's imbalance, % of the global batch."""
        return float(np.median(self.imbalance_pct))

    @property
    def quartiles_pct(self) -> tuple[float, float]:
        """The first and third quartiles of the steps' imbalance, % of the global batch."""
        first, third = np.percentile(self.imbalance_pct, [25, 75])
        return float(first), float(third)

    @property
    def whiskers_pct(self) -> tuple[float, float]:
        """The most extreme steps within 1.5 interquartile ranges of the box (Tukey, as matplotlib)."""
        first, third = self.quartiles_pct
        reach = 1.5 * (third - first)
        inside = self.imbalance_pct[(self.imbalance_pct >= first - reach) & (self.imbalance_pct <= third + reach)]
        return float(inside.min()), float(inside.max())

    @property
    def fliers_pct(self) -> np.ndarray:
        """The steps beyond the whiskers."""
        low, high = self.whiskers_pct
        return self.imbalance_pct[(self.imbalance_pct < low) | (self.imbalance_pct > high)]

    @property
    def median_transfers(self) -> float:
        """The median step's transfer count."""
        return float(np.median(self.transfers))

    @property
    def max_transfers(self) -> int:
        """The most transfers any step needs."""
        return int(self.transfers.max())


def simulate(
    batch_size: int,
    num_nodes: int,
    num_steps: int = DEFAULT_STEPS,
    seed: int = 0,
    batches_per_epoch: int = BATCHES_PER_EPOCH,
) -> ImbalanceResult:
    """Imbalance and balancing transfers of `num_steps` global batches (see `batch_counts`)."""
    counts = batch_counts(batch_size, num_nodes, num_steps, seed, batches_per_epoch)
    return ImbalanceResult(
        batch_size=batch_size,
        num_nodes=num_nodes,
        num_samples=dataset_size(batch_size, num_nodes, batches_per_epoch),
        imbalance_pct=imbalance_pct(counts, batch_size),
        transfers=transfer_counts(counts, batch_size),
    )


def median_imbalance_pct(batch_size: int, num_nodes: int, num_steps: int, seed: int = 0,
                         batches_per_epoch: int = BATCHES_PER_EPOCH) -> float:
    """The median of `simulate(...).imbalance_pct` without scheduling the transfers."""
    counts = batch_counts(batch_size, num_nodes, num_steps, seed, batches_per_epoch)
    return float(np.median(imbalance_pct(counts, batch_size)))


def sweep(batch_sizes: Sequence[int], node_counts: Sequence[int], num_steps: int = DEFAULT_STEPS,
          seed: int = 0) -> list[ImbalanceResult]:
    """`simulate` every (b, p), ordered by b then p; all arguments are checked before any work."""
    for batch_size in batch_sizes:
        for num_nodes in node_counts:
            check_shape(batch_size, num_nodes, num_steps, BATCHES_PER_EPOCH)
    return [simulate(b, p, num_steps, seed) for b in batch_sizes for p in node_counts]


def imbalance_table(results: list[ImbalanceResult], num_steps: int, seed: int) -> str:
    """One row per (b, p): median and spread of the imbalance, and of the transfers per step."""
    lines = [
        f"dataset N = {BATCHES_PER_EPOCH}·p·b samples per (b, p), evenly cached over p nodes; "
        f"{num_steps} global batches of p·b (one permutation per {BATCHES_PER_EPOCH} batches), seed {seed}",
        "imbalance = Σ deficits against b / (p·b); transfers: Algorithm 1's schedule per step (at most p − 1)",
        f"{'batch':>5} {'nodes':>5} {'N':>9} {'median %':>8} {'q1..q3 %':>12} {'whiskers %':>12} "
        f"{'transfers med':>13} {'max':>5}",
    ]
    for result in results:
        first, third = result.quartiles_pct
        low, high = result.whiskers_pct
        lines.append(
            f"{result.batch_size:>5} {result.num_nodes:>5} {result.num_samples:>9} {result.median_pct:>8.2f} "
            f"{f'{first:.2f}..{third:.2f}':>12} {f'{low:.2f}..{high:.2f}':>12} "
            f"{result.median_transfers:>13g} {result.max_transfers:>5}"
        )
    return "\n".join(lines)


def imbalance_json(results: list[ImbalanceResult], num_steps: int, seed: int) -> str:
    """`{"medians": [{"batch", "nodes", "imbalance_pct"}, ...]}` plus the boxes and the run's shape."""
    medians = [
        {"batch": r.batch_size, "nodes": r.num_nodes, "imbalance_pct": r.median_pct} for r in results
    ]
    boxes = [
        {
            "batch": r.batch_size,
            "nodes": r.num_nodes,
            "num_samples": r.num_samples,
            "median_pct": r.median_pct,
            "quartiles_pct": list(r.quartiles_pct),
            "whiskers_pct": list(r.whiskers_pct),
            "transfers_median": r.median_transfers,
            "transfers_max": r.max_transfers,
        }
        for r in results
    ]
    shape = {"steps": num_steps, "seed": seed, "batches_per_epoch": BATCHES_PER_EPOCH}
    return json.dumps({"medians": medians, "boxes": boxes, "simulation": shape})
