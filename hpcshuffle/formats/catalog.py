"""A dataset split as a numbered list of per-sample files: the unit that plans, stores and stages move."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.store import SampleMeta


class DatasetError(ValueError):
    """The dataset directory is missing or not laid out as expected."""


@dataclass(frozen=True)
class Catalog:
    """One split of a dataset stored one file per sample.

    Attributes:
        root: the dataset root (the directory holding the split directories).
        classes: class names; a sample's label is the index of its class here (empty when the
            labels live inside the files, as in DeepCAM's HDF5 samples).
        relpaths: per sample id, its path relative to `root`.
        labels: per sample id, its class index (0 when the file carries its own labels).
    """

    root: Path
    classes: tuple[str, ...]
    relpaths: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.relpaths)

    def meta(self, sample_id: int) -> SampleMeta:
        return SampleMeta(sample_id, self.relpaths[sample_id], self.labels[sample_id])

    def path(self, sample_id: int) -> Path:
        return self.root / self.relpaths[sample_id]

    def fingerprint(self) -> str:
        """A short hash of the listing (names and labels, not bytes)."""
        digest = hashlib.blake2b(digest_size=8)
        for relpath, label in zip(self.relpaths, self.labels):
            digest.update(f"{relpath}\0{label}\n".encode())
        return digest.hexdigest()
