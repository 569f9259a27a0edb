"""Dataset / Sampler / DataLoader glue: a rank reads the ids its plan lists, from where they live.

Local and partial shuffling read from the node-local store; global shuffling and validation
read the shared dataset. Items carry their sample id so the training loop can audit exactly
what it trained on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler
from torchvision.transforms import v2

from hpcshuffle.formats.catalog import Catalog
from hpcshuffle.store import sample_path

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


def image_transform(train: bool) -> v2.Compose:
    steps = [v2.PILToTensor()]
    if train:
        steps.append(v2.RandomHorizontalFlip())
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    return v2.Compose(steps)


class ImageSamples(Dataset):
    """Images by sample id, read from node-local stores or from the dataset root.

    Args:
        catalog: the split's listing (labels, file names).
        store_roots: where sample `i` lives: `store_roots[i % len(store_roots)]`. One root: the
            rank's own store (local, partial). Several: a node replica split over the node's
            ranks (global with storage.replica). None: `catalog.root`, i.e. shared storage.
    """

    def __init__(self, catalog: Catalog, store_roots: list[Path] | None, train: bool) -> None:
        self.catalog = catalog
        self.store_roots = store_roots
        self.transform = image_transform(train)

    def __len__(self) -> int:
        return len(self.catalog)

    def path(self, sample_id: int) -> Path:
        if not self.store_roots:
            return self.catalog.path(sample_id)
        root = self.store_roots[sample_id % len(self.store_roots)]
        return sample_path(root, sample_id, self.catalog.relpaths[sample_id])

    def __getitem__(self, sample_id: int) -> tuple[torch.Tensor, int, int]:
        with Image.open(self.path(sample_id)) as image:
            pixels = self.transform(image.convert("RGB"))
        return pixels, self.catalog.labels[sample_id], sample_id


class EpochOrder(Sampler[int]):
    """Yields the ids the plan says this rank trains on this epoch, in the plan's order."""

    def __init__(self) -> None:
        self.sample_ids: Sequence[int] = ()

    def set_order(self, sample_ids: np.ndarray) -> None:
        self.sample_ids = sample_ids.tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.sample_ids)

    def __len__(self) -> int:
        return len(self.sample_ids)


def make_loader(dataset: Dataset, sampler: Sampler, batch_size: int, workers: int, pin_memory: bool) -> DataLoader:
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=pin_memory,
        drop_last=False,
    )
