"""Label-skewed first partitions (plan/skew.py): every sample held once in equal shares, fewer classes a
worker than a random cut, more skew as α falls, the same split from the same seed, and clear refusals."""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.analysis.labels import balanced_labels
from hpcshuffle.plan import PlanSpec, initial_partition, plan_epochs

LABELS = tuple(balanced_labels(600, 10).tolist())  # 60 a class, listed class by class


def parts_of(partition: str, workers: int = 12, seed: int = 0, ranks_per_node: int = 1) -> list[np.ndarray]:
    return initial_partition(PlanSpec(600, workers, 4, 0.0, seed, ranks_per_node, partition, labels=LABELS))


def top_class_share(parts: list[np.ndarray]) -> float:
    """The mean over workers of the share of its most common class (1 / 10 for the dataset's mix)."""
    labels = np.asarray(LABELS)
    return float(np.mean([np.bincount(labels[part]).max() / part.size for part in parts]))


@pytest.mark.parametrize("partition", ["dirichlet-0.1", "dirichlet-1.0", "classes_per_worker-2"])
@pytest.mark.parametrize("workers, ranks_per_node", [(12, 1), (7, 1), (12, 3)])
def test_every_sample_is_held_once_in_equal_shares(partition, workers, ranks_per_node):
    parts = parts_of(partition, workers, ranks_per_node=ranks_per_node)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(600))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_classes_per_worker_gives_each_worker_its_k_classes():
    # 600 ids in 10 classes of 60, 12 workers × 2 chunks of 25: a chunk spans at most 2 classes
    labels = np.asarray(LABELS)
    for k in (1, 2, 3):
        held = [np.unique(labels[part]).size for part in parts_of(f"classes_per_worker-{k}")]
        assert max(held) <= 2 * k and np.median(held) <= k + 1
    exact = initial_partition(PlanSpec(600, 10, 4, 0.0, 5, partition="classes_per_worker-2", labels=LABELS))
    for part in exact:  # 20 chunks of 30, each inside one class: two chunks a worker, of one class or two
        assert set(np.bincount(labels[part])) <= {0, 30, 60}


def test_skew_falls_as_dirichlet_alpha_grows():
    share = {name: np.mean([top_class_share(parts_of(name, seed=seed)) for seed in range(5)])
             for name in ("dirichlet-0.1", "dirichlet-1.0", "dirichlet-100", "random")}
    assert share["dirichlet-0.1"] > share["dirichlet-1.0"] > share["dirichlet-100"]
    assert share["dirichlet-100"] <= share["random"]  # large α: the dataset's mix, more evenly than a random cut
    assert top_class_share(parts_of("contiguous")) > share["dirichlet-0.1"]


def test_the_seed_fixes_the_split():
    for name in ("dirichlet-0.5", "classes_per_worker-2"):
        same = [np.array_equal(a, b) for a, b in zip(parts_of(name, seed=3), parts_of(name, seed=3))]
        assert all(same)
        assert not all(np.array_equal(a, b) for a, b in zip(parts_of(name, seed=3), parts_of(name, seed=4)))


def test_partial_shuffling_keeps_every_sample_of_a_skewed_split():
    spec = PlanSpec(600, 12, 4, 0.3, 2, partition="dirichlet-0.1", labels=LABELS)
    for plan in plan_epochs(spec, "partial", 3):
        assert np.array_equal(np.sort(np.concatenate(plan.held)), np.arange(600))


@pytest.mark.parametrize("partition, labels, shards, message", [
    ("dirichlet-0.1", None, 1, r"splits by class, so the plan needs the class of each of the 600 samples, but it was "
                               r"given none"),
    ("dirichlet-0.1", LABELS[:10], 1, "but it was given 10"),
    ("classes_per_worker-2", LABELS, 4, "use shuffle.unit=sample"),
    ("classes_per_worker-11", LABELS, 1, "the dataset has 10 classes; give at most 10"),
    ("dirichlet-0", LABELS, 1, "concentration α > 0"),
    ("dirichlet-x", LABELS, 1, "concentration α > 0"),
    ("classes_per_worker-0", LABELS, 1, "a whole number >= 1"),
])
def test_bad_skewed_partitions_are_refused_by_name(partition, labels, shards, message):
    with pytest.raises(ValueError, match=message):
        initial_partition(PlanSpec(600, 12, 4, 0.0, 0, partition=partition, shard_samples=shards, labels=labels))
