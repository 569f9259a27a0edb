"""A dataset split as a numbered list of samples: the unit that plans, stores and stages move.

A sample is a file (an image, an HDF5 file) or, in a `Catalog` subclass, a record inside a
larger file (CIFAR's batches, the shards of a `ShardedCatalog`); staging and the loader only use
`stat` and `read_chunks`.

A catalog's reads are reads of shared storage: by default each drops the file from this node's
page cache after reading it, so that every epoch pays what shared storage costs (shared_io.py).
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from hpcshuffle.files import drop_cached, read_chunks


@dataclass(frozen=True)
class SampleMeta:
    """What the store keeps about a sample besides its bytes.

    `nbytes` and `checksum` describe the bytes (checked on every verify and after every
    transfer); `source_mtime_ns` is the source file's mtime when it was staged, so a dataset
    changed since staging is noticed.
    """

    sample_id: int
    relpath: str  # path inside the dataset root, e.g. "train/class_003/000123.jpg"
    label: int
    nbytes: int = 0
    checksum: str = ""
    source_mtime_ns: int = 0

    def row(self) -> list:
        """The fields after `sample_id`, in the order a manifest or pack trailer records them."""
        return [self.relpath, self.label, self.nbytes, self.checksum, self.source_mtime_ns]


class DatasetError(ValueError):
    """The dataset directory is missing or not laid out as expected."""


def find_split(root: Path, split: str, kind: str, expected: str) -> Path:
    """`root/split`, or a DatasetError naming it and what was `expected` there (the layout, how to make one)."""
    split_dir = Path(root) / split
    if not split_dir.is_dir():
        raise DatasetError(f"{kind} split {split_dir} not found; expected {expected}")
    return split_dir


def changed_since_listing(path: Path) -> DatasetError:
    """The error for a container whose samples were listed from an older version of it."""
    return DatasetError(f"{path} changed since the dataset was listed; list it again (restart the run or the staging)")


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
        """A sample's meta as listed: relpath and label, no size or checksum yet."""
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
        """The sample's bytes, `read_chunks` joined."""
        return b"".join(self.read_chunks(sample_id))

    def fingerprint(self) -> str:
        """A short hash of the listing (names and labels, not bytes)."""
        digest = hashlib.blake2b(digest_size=8)
        for relpath, label in zip(self.relpaths, self.labels):
            digest.update(f"{relpath}\0{label}\n".encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class ShardedCatalog(Catalog):
    """A split whose samples are records inside shard files (tar shards, packed HDF5 files).

    A shard that a store takes whole is read at once (`read_shard`) and kept as one pack
    (store.py); a sample on its own is read as a record (`read_chunks`). Subclasses say where a
    sample lies in its shard and how many bytes it is.

    Attributes:
        shards: the shard files, relative to `root`, in listing order.
        shard_mtime_ns: per shard, its mtime when listed; reading a shard changed since then is
            a DatasetError, not bytes at offsets that no longer hold the sample.
        sample_shard: per sample id, the index of its shard in `shards`; non-decreasing, so a
            shard's samples have consecutive ids.
    """

    shards: tuple[str, ...]
    shard_mtime_ns: tuple[int, ...]
    sample_shard: tuple[int, ...]

    def path(self, sample_id: int) -> Path:
        return self.root / self.shards[self.sample_shard[sample_id]]

    def shard_samples(self, shard: int) -> range:
        """The ids of the samples that shard `shard` holds (its sample count is the range's length)."""
        return range(bisect_left(self.sample_shard, shard), bisect_right(self.sample_shard, shard))

    def uniform_shard_samples(self) -> int:
        """G, the samples of every shard but the last (which may hold fewer): the plan's shard j is
        ids [jG, (j+1)G) (plan/shards.py). A split whose shards differ is a DatasetError."""
        counts = [len(self.shard_samples(shard)) for shard in range(len(self.shards))]
        if any(count != counts[0] for count in counts[:-1]) or counts[-1] > counts[0]:
            raise DatasetError(
                f"shuffle.unit=shard needs shards of one sample count (a shorter last one aside), but the shards "
                f"under {self.root} hold {min(counts)}..{max(counts)} samples: pack them again with "
                "`hpcshuffle pack --shard-samples G`"
            )
        return counts[0]

    def sample_nbytes(self, sample_id: int) -> int:
        """The size of the sample's bytes as `read_chunks` gives them."""
        raise NotImplementedError

    def read_shard(self, shard: int) -> bytes:
        """The bytes of every sample of `shard`, in id order, back to back (as `read_chunks`
        gives each); subclasses read the shard in one go."""
        return b"".join(chunk for sample_id in self.shard_samples(shard) for chunk in self.read_chunks(sample_id))

    def stat(self, sample_id: int) -> SourceFile:
        return SourceFile(self.sample_nbytes(sample_id), os.stat(self.path(sample_id)).st_mtime_ns)

    @contextmanager
    def open_shard(self, sample_id: int, offset: int = 0, length: int = 0) -> Iterator[BinaryIO]:
        """The sample's shard, opened for reading and checked unchanged since listing.

        Args:
            offset, length: the bytes the read touches (0, 0: the whole file), dropped from the
                page cache afterwards when the catalog is `uncached`.
        """
        path = self.path(sample_id)
        with open(path, "rb") as shard:
            # an fstat per read, as CIFAR's stat per read: staging must never be handed the
            # bytes of another version of the shard under the mtime it statted
            if os.fstat(shard.fileno()).st_mtime_ns != self.shard_mtime_ns[self.sample_shard[sample_id]]:
                raise changed_since_listing(path)
            try:
                yield shard
            finally:
                if self.uncached:
                    drop_cached(shard.fileno(), offset, length)
