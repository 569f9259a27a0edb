"""A dataset split as a numbered list of samples: the unit that plans, stores and stages move.

A sample is a file (an image, an HDF5 file) or, in a `Catalog` subclass, a record inside a
larger file (CIFAR's batches); staging and the loader only use `stat` and `read_chunks`.

A catalog's reads are reads of shared storage: by default each drops the file from this node's
page cache after reading it, so that every epoch pays what shared storage costs (shared_io.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hpcshuffle.store import SampleMeta, read_chunks


class DatasetError(ValueError):
    """The dataset directory is missing or not laid out as expected."""


@dataclass(frozen=True)
class SourceFile:
    """A sample's size and its source file's mtime, as staging records them."""

    nbytes: int
    mtime_ns: int


@dataclass(frozen=True)
class Catalog:
    """One split of a dataset stored one file per sample.

    Attributes:
        root: the dataset root (the directory holding the split directories).
        classes: class names; a sample's label is the index of its class here (empty when the
            labels live inside the files, as in DeepCAM's HDF5 samples).
        relpaths: per sample id, its path relative to `root`.
        labels: per sample id, its class index (0 when the file carries its own labels).
        uncached: drop a file's pages from the page cache once it is read (storage.shared_reads).
        mount: the mount point the dataset was listed on (shared_io.Mount), to tell a failed read
            from shared storage that went away; None when not known.
    """

    root: Path
    classes: tuple[str, ...]
    relpaths: tuple[str, ...]
    labels: tuple[int, ...]
    uncached: bool = field(default=True, kw_only=True)
    mount: Path | None = field(default=None, kw_only=True)

    def __len__(self) -> int:
        return len(self.relpaths)

    def meta(self, sample_id: int) -> SampleMeta:
        return SampleMeta(sample_id, self.relpaths[sample_id], self.labels[sample_id])

    def path(self, sample_id: int) -> Path:
        """The file on shared storage that holds the sample."""
        return self.root / self.relpaths[sample_id]

    def stat(self, sample_id: int) -> SourceFile:
        """The sample's size and mtime on shared storage (raises FileNotFoundError if gone)."""
        info = os.stat(self.path(sample_id))
        return SourceFile(info.st_size, info.st_mtime_ns)

    def read_chunks(self, sample_id: int) -> Iterator[bytes]:
        """The sample's bytes, as they are staged and exchanged (a whole file, here)."""
        return read_chunks(self.path(sample_id), uncached=self.uncached)

    def read_bytes(self, sample_id: int) -> bytes:
        return b"".join(self.read_chunks(sample_id))

    def fingerprint(self) -> str:
        """A short hash of the listing (names and labels, not bytes)."""
        digest = hashlib.blake2b(digest_size=8)
        for relpath, label in zip(self.relpaths, self.labels):
            digest.update(f"{relpath}\0{label}\n".encode())
        return digest.hexdigest()
