"""Label skew: how class-skewed each worker's batches are, the part of shuffle quality that accuracy feels.

Pair mixing (quality.py) counts which samples have shared a worker and ignores what they are. With
synchronous SGD the summed gradient of local or partial shuffling is global shuffling's except that
BatchNorm normalises over each worker's local batch (Nguyen et al. 2022, §IV-A), so what can cost
accuracy is a local batch whose classes are not the dataset's: a worker whose partition holds two
classes normalises over those two. Random local shuffling and contiguous local shuffling mix pairs
equally badly (≈ 1/M) and lose 0 and 60 points; their labels tell them apart. Per epoch:

- `same_class`: the rate at which two samples of one worker's local batch share a class,
  Σ_c n_c(n_c − 1) / (n(n − 1)) over the batch's class counts n_c, averaged over the epoch's local
  batches (of two samples or more);
- `global_batch`: the same rate over each step's global batch (every worker's local batch of the
  step together), averaged over steps; with M·b samples from every worker it stays near the
  dataset's rate under any strategy;
- `excess`: same_class − global_batch, ≈ 0 under global shuffling (up to noise), up to
  1 − global_batch when every local batch is a single class;
- `expected`: Σ_c N_c(N_c − 1) / (N(N − 1)), the rate of a batch drawn uniformly from the dataset
  (1/C for C balanced classes), what global shuffling gives on average;
- `partition_tv`, `partition_tv_max`: per worker the total variation distance between the labels it
  trains on this epoch and the dataset's, ½ Σ_c |n_rc/n_r − N_c/N|, mean and largest over workers.

Everything follows from the plan (who trains on which ids, in which order) and the dataset's
labels, so it is computed before training as well as during it (`hpcshuffle plan --quality`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from hpcshuffle.analysis.quality import PairMixing
from hpcshuffle.errors import at_least
from hpcshuffle.formats import get_format
from hpcshuffle.plan import EpochPlan, PlanSpec, plan_epochs

NO_LABELS = "has no class labels"  # what a run or `plan --quality` says of a dataset without them


def balanced_labels(num_samples: int, num_classes: int) -> np.ndarray:
    """The labels of an ImageFolder listing of `num_samples` images in `num_classes` balanced classes
    (`hpcshuffle synth` puts image i in class i mod C; the listing sorts by class, so ids run class
    by class, the first N mod C classes one image larger)."""
    if num_classes < 1 or num_samples < num_classes:
        raise ValueError(f"--classes must be between 1 and the samples ({num_samples}), got {num_classes}")
    counts = np.full(num_classes, num_samples // num_classes, dtype=np.int64)
    counts[: num_samples % num_classes] += 1
    return labels_from_counts(counts)


def labels_from_counts(counts: Sequence[int]) -> np.ndarray:
    """Labels for class counts given in class order (ids run class by class, as a listing gives them)."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any():
        raise ValueError(f"label counts must be a non-empty list of counts >= 0, got {counts.tolist()[:8]}")
    return np.repeat(np.arange(counts.size, dtype=np.int64), counts)


def same_class_rate(group: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[float, int]:
    """(mean over groups of their same-class pair rate, groups counted) for samples `labels[i]` that
    belong to group `group[i]`; groups of fewer than two samples are left out."""
    if group.size == 0:
        return float("nan"), 0
    keys, counts = np.unique(group * num_classes + labels, return_counts=True)
    same = np.bincount(keys // num_classes, weights=counts * (counts - 1.0))
    sizes = np.bincount(group).astype(np.float64)
    same = np.pad(same, (0, sizes.size - same.size))
    kept = sizes >= 2
    if not kept.any():
        return float("nan"), 0
    return float(np.mean(same[kept] / (sizes[kept] * (sizes[kept] - 1.0)))), int(kept.sum())


class LabelSkew:
    """The label-aware shuffle quality of a run's epochs, from its plans and its dataset's labels.

    Args:
        labels: int array (N,), the class of each sample id 0..N-1.
        batch_size: b, each worker's local batch; a worker's order is cut into batches of b in order.
    """

    def __init__(self, labels: np.ndarray, batch_size: int) -> None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size < 2 or labels.dtype.kind not in "iu":
            raise ValueError(f"labels must be a 1-D integer array of at least 2 samples, got {labels.shape} "
                             f"{labels.dtype}")
        at_least("labels", int(labels.min()), 0)
        at_least("the batch size", batch_size)
        self.labels = labels.astype(np.int64)
        self.batch_size = batch_size
        self.num_classes = int(self.labels.max()) + 1
        self.class_counts = np.bincount(self.labels, minlength=self.num_classes)
        num_samples = self.labels.size
        self.dataset_share = self.class_counts / num_samples
        self.expected = float(np.sum(self.class_counts * (self.class_counts - 1.0)) / (num_samples * (num_samples - 1.0)))

    def epoch(self, order: Sequence[np.ndarray]) -> dict[str, float]:
        """The measure of one epoch: `order[r]`, the ids worker r trains on, in order."""
        arrays = [np.asarray(ids, dtype=np.int64) for ids in order]
        for rank, ids in enumerate(arrays):
            if ids.size and (ids.min() < 0 or ids.max() >= self.labels.size):
                bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                raise ValueError(f"rank {rank} trains on sample {bad}, outside 0..{self.labels.size - 1}")
        num_ranks, classes = len(arrays), self.num_classes
        lengths = np.array([ids.size for ids in arrays], dtype=np.int64)
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        labels = self.labels[ids]
        rank = np.repeat(np.arange(num_ranks, dtype=np.int64), lengths)
        position = np.arange(ids.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        step = position // self.batch_size
        steps = int(step.max()) + 1 if step.size else 0
        local, _ = same_class_rate(rank * steps + step, labels, classes)
        global_batch, _ = same_class_rate(step, labels, classes)
        held = np.bincount(rank * classes + labels, minlength=num_ranks * classes).reshape(num_ranks, classes)
        share = held / np.maximum(lengths, 1)[:, None]
        tv = 0.5 * np.abs(share - self.dataset_share).sum(axis=1)[lengths > 0]
        return {
            "same_class": round(local, 6),
            "global_batch": round(global_batch, 6),
            "excess": round(local - global_batch, 6),
            "expected": round(self.expected, 6),
            "partition_tv": round(float(tv.mean()), 6) if tv.size else float("nan"),
            "partition_tv_max": round(float(tv.max()), 6) if tv.size else float("nan"),
        }


class EpochQuality:
    """What a run records as `mixing` per epoch: pair mixing (cumulative) and, where the dataset has
    class labels, the label skew of the epoch's batches under `labels`."""

    def __init__(self, mixing: PairMixing, skew: LabelSkew | None) -> None:
        self.mixing = mixing
        self.skew = skew

    def add_epoch(self, order: Sequence[np.ndarray]) -> dict:
        """The epoch's `mixing` record: cumulative pair mixing after it, with its label skew under `labels`
        where the dataset has class labels. `order[r]`: the ids rank r trains on this epoch."""
        record: dict = self.mixing.add_epoch(order)
        if self.skew is not None:
            record["labels"] = self.skew.epoch(order)
        return record


def shuffle_quality(dataset_format: str, labels: Sequence[int], spec: PlanSpec) -> EpochQuality:
    """Rank 0's `mixing` of every epoch of a run: pair mixing, and label skew where the format's
    listing holds the classes (said once when it does not)."""
    skew = None
    if get_format(dataset_format).class_labels:
        skew = LabelSkew(np.asarray(labels, dtype=np.int64), spec.batch_size)
    else:
        print(f"shuffle quality: dataset format {dataset_format} {NO_LABELS} (they are inside the "
              "files), so metrics.jsonl records pair mixing and no label skew", flush=True)
    return EpochQuality(PairMixing(spec.num_samples, spec.num_ranks, seed=spec.seed), skew)


def plan_quality(spec: PlanSpec, shuffle: str, epochs: int, labels: np.ndarray | None) -> list[dict]:
    """Shuffle quality before training: per epoch of the plan of `spec` under `shuffle`, what a run
    records as `mixing` (pair mixing, and with `labels`, the class of each sample id, label skew)."""
    return plans_quality(spec, plan_epochs(spec, shuffle, epochs), labels)


def plans_quality(spec: PlanSpec, plans: Iterable[EpochPlan], labels: np.ndarray | None) -> list[dict]:
    """`plan_quality` of plans already made: `plans`, a run's epochs from 0 in order, under `spec`."""
    skew = LabelSkew(labels, spec.batch_size) if labels is not None else None
    quality = EpochQuality(PairMixing(spec.num_samples, spec.num_ranks, seed=spec.seed), skew)
    return [{"epoch": plan.epoch, "mixing": quality.add_epoch(plan.order)} for plan in plans]


def predict_q(spec: PlanSpec, epochs: int, labels: np.ndarray, candidates: Sequence[float], tolerance: float,
              by_epoch: int | None = None) -> dict:
    """q without training: the smallest candidate q whose label skew at epoch `by_epoch` (default: the
    last) is within `tolerance` of global shuffling's under the same spec; q = 0 is local shuffling.

    Returns:
        {"workers", "by_epoch", "global": GS's skew, "skew": {q: skew}, "q": the smallest q, or None}.
    """
    epoch = epochs - 1 if by_epoch is None else by_epoch
    if not 0 <= epoch < epochs:
        raise ValueError(f"--by-epoch {by_epoch} is not one of the planned epochs 0..{epochs - 1}")
    at_least("the skew tolerance", tolerance, 0)

    def skew_at(shuffle: str, q: float) -> float:
        rows = plan_quality(replace(spec, q=q), shuffle, epoch + 1, labels)
        return rows[epoch]["mixing"]["labels"]["excess"]

    reference = skew_at("global", 1.0)
    skews = {q: skew_at("local" if q == 0 else "partial", q) for q in sorted(set(candidates))}
    reaching = [q for q, skew in skews.items() if skew <= reference + tolerance]
    return {"workers": spec.num_ranks, "by_epoch": epoch, "global": reference, "skew": skews,
            "q": min(reaching) if reaching else None}
