"""Dataset / Sampler / DataLoader glue: a rank reads the ids its plan lists, from where they live.

Local and partial shuffling read from the node-local store; global shuffling and validation
read the shared dataset. The format's codec turns bytes into tensors. Items carry their sample id so the training loop can audit exactly
what it trained on.

Random augmentation is seeded by (run seed, epoch, sample id), not by a process's RNG stream:
a sample is augmented alike whichever rank reads it, with any number of loader workers, and
after a resume, so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.codec import Codec
from hpcshuffle.store import sample_path

ON_ERROR = ("fail", "skip")


def augmentation_seed(seed: int, epoch: int, sample_id: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, sample_id]).generate_state(1)[0])


class Samples(Dataset):
    """Samples keyed by (epoch, sample id), read from node-local stores or shared storage, decoded by `codec`.

    Args:
        catalog: the split's listing (labels, where each sample's bytes are).
        codec: the format's decoder (formats/codec.py).
        store_roots: where sample `i` lives: `store_roots[i % len(store_roots)]`. One root: the
            rank's own store (local, partial). Several: a node replica split over the node's
            ranks (global with storage.replica). None: the catalog, i.e. shared storage.
        train: augment (seeded by `seed`, the epoch and the sample id).
        on_error: a sample that cannot be read or decoded either fails the run naming its file
            ("fail") or is left out of its batch and counted ("skip"; the item is None).
    """

    def __init__(
        self, catalog: Catalog, codec: Codec, store_roots: list[Path] | None, train: bool, seed: int = 0,
        on_error: str = "fail",
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.catalog = catalog
        self.codec = codec
        self.store_roots = store_roots
        self.train = train
        self.seed = seed
        self.on_error = on_error

    def __len__(self) -> int:
        return len(self.catalog)

    def where(self, sample_id: int) -> Path:
        if not self.store_roots:
            return self.catalog.path(sample_id)
        root = self.store_roots[sample_id % len(self.store_roots)]
        return sample_path(root, sample_id, self.catalog.relpaths[sample_id])

    def read(self, sample_id: int) -> bytes:
        if not self.store_roots:
            return self.catalog.read_bytes(sample_id)
        return self.where(sample_id).read_bytes()

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int | torch.Tensor, int] | None:
        epoch, sample_id = key
        label = self.catalog.labels[sample_id]
        try:
            data = self.read(sample_id)
            if not self.train:
                return (*self.codec.decode(data, label, train=False), sample_id)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(augmentation_seed(self.seed, epoch, sample_id))
                return (*self.codec.decode(data, label, train=True), sample_id)
        except (OSError, ValueError) as err:  # codecs raise SampleError, a ValueError
            if self.on_error == "skip":
                return None
            raise DatasetError(
                f"cannot read sample {sample_id} ({self.catalog.relpaths[sample_id]}) from "
                f"{self.where(sample_id)}: {err}; replace or remove the file, or set loader.on_error=skip "
                "to leave unreadable samples out (they are counted as `skipped` in metrics.jsonl)"
            ) from None


def collate_skipping(items: list) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, int]:
    """Batch the readable items; (images, labels, ids, how many were skipped). Images None if all were."""
    kept = [item for item in items if item is not None]
    skipped = len(items) - len(kept)
    if not kept:
        return None, torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), skipped
    images, labels, sample_ids = default_collate(kept)
    return images, labels, sample_ids, skipped


class EpochOrder(Sampler[tuple[int, int]]):
    """Yields (epoch, id) for the ids the plan says this rank trains on this epoch, in the plan's order."""

    def __init__(self) -> None:
        self.epoch = 0
        self.sample_ids: Sequence[int] = ()

    def set_order(self, sample_ids: np.ndarray, epoch: int = 0) -> None:
        self.epoch = epoch
        self.sample_ids = sample_ids.tolist()

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((self.epoch, sample_id) for sample_id in self.sample_ids)

    def __len__(self) -> int:
        return len(self.sample_ids)


def ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave SIGUSR1 / SIGTERM to their rank (Slurm signals every process of a
    step); the rank stops them when it has checkpointed, and they exit if it dies."""
    for stop in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)


def make_loader(dataset: Dataset, sampler: Sampler, batch_size: int, workers: int, pin_memory: bool) -> DataLoader:
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=pin_memory,
        drop_last=False,
        collate_fn=collate_skipping,
        worker_init_fn=ignore_stop_signals if workers > 0 else None,
    )
