"""Label-skewed first partitions (storage.partition=dirichlet-α, classes_per_worker-k): the non-IID
splits of the federated-learning literature, cut to the equal shares synchronous SGD needs.

Both build an order of the sample ids whose consecutive runs, cut like `contiguous` cuts 0..N-1
(parts differing in size by at most 1), hold few classes:

- `dirichlet-α`: every class is split over the parts by weights drawn from Dirichlet(α, …, α)
  (Hsu et al. 2019; Wang et al. 2020). The class × part matrix of expected counts is then scaled
  (Sinkhorn) so each part's total is its equal share while each class keeps its count: parts that
  drew little take more of the classes they already lean to. Small α gives a part one or two
  classes, α = 1 a few dominant ones, large α the dataset's mix.
- `classes_per_worker-k`: the ids sorted by class (randomly within one) are cut into k·P equal
  chunks, dealt k to a part in a seeded random order (McMahan et al. 2017's pathological split).
  A part holds k chunks, so about k classes; a chunk straddling two classes adds a few of a third.

A part is a node's where ranks share a node (storage.scope=node), else a rank's. The split depends
on the seed, as `random` does; it needs the classes, so the plan is given the training labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DIRICHLET, CLASSES_PER_WORKER = "dirichlet", "classes_per_worker"
SKEWED = (DIRICHLET, CLASSES_PER_WORKER)
SINKHORN_ROUNDS = 2000
FLOOR = 1e-9  # every part may take any class at a vanishing weight, so equal shares are always reachable


def parse_skew(partition: str) -> tuple[str, float] | None:
    """("dirichlet", α) or ("classes_per_worker", k) for a label-skewed partition's name, None for another
    name; a skewed name with a bad parameter raises ValueError naming the fix."""
    kind, dash, value = partition.partition("-")
    if kind not in SKEWED:
        return None
    try:
        number = float(value) if dash else float("nan")
    except ValueError:
        number = float("nan")
    if kind == DIRICHLET and not number > 0:
        raise ValueError(f"storage.partition={partition}: give Dirichlet's concentration α > 0 after the dash, "
                         "e.g. dirichlet-0.1 (few classes a worker) or dirichlet-1.0")
    if kind == CLASSES_PER_WORKER and not (number >= 1 and number == int(number)):
        raise ValueError(f"storage.partition={partition}: give the classes per worker, a whole number >= 1, "
                         "after the dash, e.g. classes_per_worker-2")
    return kind, number


def skewed_order(partition: str, labels: Sequence[int], parts: int, rng: np.random.Generator) -> np.ndarray:
    """int64 (N,): the sample ids in an order whose `parts` consecutive runs (np.array_split) are the
    label-skewed partition named `partition`."""
    kind, value = parse_skew(partition)
    labels = np.asarray(labels, dtype=np.int64)
    shuffled = rng.permutation(labels.size)
    by_class = shuffled[np.argsort(labels[shuffled], kind="stable")]  # class by class, random within one
    if kind == CLASSES_PER_WORKER:
        return dealt_chunks(by_class, labels, int(value), parts, rng)
    return dirichlet_order(by_class, labels, value, parts, rng)


def dealt_chunks(by_class: np.ndarray, labels: np.ndarray, per_part: int, parts: int,
                 rng: np.random.Generator) -> np.ndarray:
    """classes_per_worker: `by_class` cut into per_part·parts chunks, laid out in a seeded random order."""
    classes = np.unique(labels).size
    if per_part > classes:
        raise ValueError(f"storage.partition=classes_per_worker-{per_part}: the dataset has {classes} classes; "
                         f"give at most {classes}")
    if per_part * parts > labels.size:
        raise ValueError(f"storage.partition=classes_per_worker-{per_part}: {per_part}·{parts} chunks of "
                         f"{labels.size} samples leave some empty; give fewer classes per worker")
    chunks = np.array_split(by_class, per_part * parts)
    return np.concatenate([chunks[index] for index in rng.permutation(len(chunks))])


def dirichlet_order(by_class: np.ndarray, labels: np.ndarray, alpha: float, parts: int,
                    rng: np.random.Generator) -> np.ndarray:
    """dirichlet-α: each class's samples spread over the parts' stretches of one line by its share matrix
    (`dirichlet_shares`), then read off the line in order."""
    counts = np.bincount(labels)
    present = np.flatnonzero(counts)
    share = dirichlet_shares(counts[present], alpha, parts, rng)  # (classes present, parts)
    # on a line of length N, part j's stretch holds class c's segment of length share[c, j], classes in order
    starts = np.cumsum(share.ravel(order="F")).reshape(share.shape, order="F") - share
    position = np.empty(labels.size)
    first = 0
    for row, count in enumerate(counts[present]):
        ids = by_class[first : first + count]
        first += count
        filled = np.cumsum(share[row]) - share[row]  # class c's length laid down before each part
        u = np.arange(count) + 0.5  # the class's i-th sample sits at the middle of its unit
        part = np.searchsorted(filled, u, side="right") - 1
        position[ids] = starts[row, part] + (u - filled[part])
    return np.argsort(position, kind="stable")


def dirichlet_shares(counts: np.ndarray, alpha: float, parts: int, rng: np.random.Generator) -> np.ndarray:
    """float (C, parts): class c's expected samples in each part, counts[c]·Dirichlet(α) weights, scaled
    (Sinkhorn) until every part's total is its equal share and every class's total its count."""
    sizes = np.array([len(part) for part in np.array_split(np.arange(counts.sum()), parts)], dtype=np.float64)
    share = counts[:, None] * (rng.dirichlet(np.full(parts, alpha), size=counts.size) + FLOOR)
    for _ in range(SINKHORN_ROUNDS):
        share *= sizes / share.sum(axis=0)
        share *= (counts / share.sum(axis=1))[:, None]
        if np.abs(share.sum(axis=0) - sizes).max() < 1e-6:
            break
    return share
