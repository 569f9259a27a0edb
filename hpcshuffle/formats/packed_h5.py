"""DeepCAM samples packed many to an HDF5 file: ``<root>/{train,validation}/*.h5`` + ``<root>/stats.h5``.

Each file holds ``data`` (n, H, W, 16) float32 and ``labels`` (n, H, W) integer classes (0
background, 1 tropical cyclone, 2 atmospheric river), row r of both being one sample; ``stats.h5``
is DeepCAM's. Rows should be contiguous or chunked one row a chunk (as `synthesize` writes them),
so that reading a sample is one read.

A sample's bytes are its row written out as a per-sample DeepCAM file (``climate/data``,
``climate/labels_0``: deepcam.sample_bytes), so DeepCAM's codec and stats are used as they are,
a store keeps a packed sample as the ``.h5`` file DeepCAM would have had, and a packed dataset
and a per-sample one of the same arrays train identically. The wrapping costs ~1 ms and ~3 KB
(HDF5's superblock and object headers) a sample, next to the 884 KB of a 96 × 144 one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from hpcshuffle.errors import at_least
from hpcshuffle.formats import deepcam
from hpcshuffle.formats.catalog import DatasetError, ShardedCatalog, find_split
from hpcshuffle.formats.codec import DatasetFormat

SPLITS = deepcam.SPLITS
DATA, LABELS = "data", "labels"


@dataclass(frozen=True)
class PackedH5Catalog(ShardedCatalog):
    """A split of packed HDF5 files: sample i is row `rows[i]` of its file.

    `relpaths` are virtual (``train/packed-00002/00005.h5``). A file's samples are
    `shard_samples(file)`; each sample's bytes are the same size within a file.

    Attributes:
        rows: per sample, its row in its file.
        shard_sample_nbytes: per file, the size of one of its samples' bytes.
    """

    rows: tuple[int, ...]
    shard_sample_nbytes: tuple[int, ...]

    def sample_nbytes(self, sample_id: int) -> int:
        return self.shard_sample_nbytes[self.sample_shard[sample_id]]

    def read_chunks(self, sample_id: int) -> Iterator[bytes]:
        row = self.rows[sample_id]
        with self.open_shard(sample_id) as shard, h5py.File(shard, "r") as packed:
            fields, labels = packed[DATA][row], packed[LABELS][row]
        return iter((deepcam.sample_bytes(fields, labels),))

    def read_shard(self, shard: int) -> bytes:
        """The file's rows (a file's samples are its rows 0..n-1) read as two slices, fields and
        labels; each row's bytes as `read_chunks` gives them."""
        ids = self.shard_samples(shard)
        with self.open_shard(ids[0]) as source, h5py.File(source, "r") as packed:
            fields, labels = packed[DATA][: len(ids)], packed[LABELS][: len(ids)]
        return b"".join(deepcam.sample_bytes(f, lab) for f, lab in zip(fields, labels, strict=True))


@cache
def sample_nbytes(shape: tuple[int, int], data_dtype: str, labels_dtype: str) -> int:
    """The size of a sample's bytes: that of any (H, W, 16) fields and (H, W) labels of these dtypes."""
    return len(deepcam.sample_bytes(np.zeros((*shape, deepcam.CHANNELS), data_dtype), np.zeros(shape, labels_dtype)))


def list_file(path: Path) -> tuple[int, int]:
    """(rows, bytes of one sample) of a packed file, from its metadata."""
    try:
        with h5py.File(path, "r") as packed:
            datasets = {name: packed.get(name) for name in (DATA, LABELS)}
            missing = [name for name, dataset in datasets.items() if not isinstance(dataset, h5py.Dataset)]
            if missing:
                raise DatasetError(
                    f"{path} has no {' or '.join(missing)} dataset; a packed file holds {DATA} (n, H, W, "
                    f"{deepcam.CHANNELS}) and {LABELS} (n, H, W)"
                )
            data, labels = datasets[DATA], datasets[LABELS]
            if data.ndim != 4 or data.shape[3] != deepcam.CHANNELS or labels.shape[1:] != data.shape[1:3]:
                raise DatasetError(
                    f"{path}: {DATA} {data.shape} and {LABELS} {labels.shape}; expected (n, H, W, "
                    f"{deepcam.CHANNELS}) and (n, H, W)"
                )
            if labels.shape[0] != data.shape[0]:
                raise DatasetError(
                    f"{path}: {DATA} has {data.shape[0]} rows but {LABELS} has {labels.shape[0]}; each row is "
                    "one sample, so both need one per sample"
                )
            return data.shape[0], sample_nbytes(data.shape[1:3], data.dtype.str, labels.dtype.str)
    except OSError as err:
        raise DatasetError(f"{path} is not a readable HDF5 file (truncated or corrupt?): {err}") from None


def scan(root: str | Path, split: str) -> PackedH5Catalog:
    """List `root/split/*.h5` in name order and their rows; labels are inside the rows, so all are 0."""
    root = Path(root)
    split_dir = find_split(
        root, split, "packed DeepCAM", f"{root}/{{{','.join(SPLITS)}}}/*.h5 — make one with "
        f"`hpcshuffle synth packed_h5 --out {root} --samples N` or set dataset.root"
    )
    paths = sorted(split_dir.glob("*.h5"))
    listed = [list_file(path) for path in paths]
    samples = [(index, row) for index, (rows, _) in enumerate(listed) for row in range(rows)]
    if not samples:
        raise DatasetError(f"{split_dir} holds no .h5 files with rows")
    shard_index, rows = zip(*samples)
    digits = max(5, len(str(max(rows))))
    return PackedH5Catalog(
        root, (), tuple(f"{split}/{paths[index].stem}/{row:0{digits}d}.h5" for index, row in samples),
        (0,) * len(samples),
        shards=tuple(f"{split}/{path.name}" for path in paths),
        shard_mtime_ns=tuple(path.stat().st_mtime_ns for path in paths),
        sample_shard=shard_index, rows=rows, shard_sample_nbytes=tuple(nbytes for _, nbytes in listed),
    )


def synthesize(
    out: str | Path, *, seed: int, progress: bool, samples: int, val_samples: int | None = None,
    height: int = 64, width: int = 96, file_samples: int = 16,
) -> Path:
    """`synth deepcam`'s samples (the same arrays for the same seed and index), packed
    `file_samples` to a file in order, with `out/stats.h5` from the training samples.

    Returns:
        The dataset root, `out`.
    """
    val_samples = deepcam.check_spec(samples, val_samples, height, width)
    at_least("--file-samples", file_samples)
    out = Path(out)
    stats = deepcam.ChannelStats()
    first_ids = {SPLITS[0]: 0, SPLITS[1]: samples}  # sample indices continue across splits, as in synth deepcam
    with tqdm(total=samples + val_samples, desc=f"synth {out}", unit="sample", disable=not progress) as bar:
        for split, count in zip(SPLITS, (samples, val_samples)):
            (out / split).mkdir(parents=True, exist_ok=True)
            for file_index, first in enumerate(range(0, count, file_samples)):
                rows = min(file_samples, count - first)
                with h5py.File(out / split / f"packed-{file_index:05d}.h5", "w") as packed:
                    # one chunk a row: a sample is one read, and rows are written without holding a file's worth
                    data = packed.create_dataset(DATA, (rows, height, width, deepcam.CHANNELS), np.float32,
                                                 chunks=(1, height, width, deepcam.CHANNELS))
                    labels = packed.create_dataset(LABELS, (rows, height, width), np.int8, chunks=(1, height, width))
                    for row in range(rows):
                        rng = np.random.default_rng([seed, first_ids[split] + first + row])
                        fields, labels[row] = deepcam.synth_sample(rng, height, width)
                        data[row] = fields
                        if split == SPLITS[0]:
                            stats.add(fields)
                        bar.update()
    stats.write(out)
    return out


FORMAT = DatasetFormat(SPLITS, scan, deepcam.make_codec, synthesize, class_labels=False)
