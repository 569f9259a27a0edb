"""CIFAR-100 as distributed: one container file per split; a sample is one record inside it.

``root`` is the parent of, or itself, one of the two standard layouts (no download):

    cifar-100-python/{train,test,meta}       pickled dicts: b"data" (N, 3072) uint8,
                                             b"fine_labels", b"coarse_labels"; meta: b"fine_label_names"
    cifar-100-binary/{train,test}.bin        N records of [coarse label, fine label, 3072 pixels]
                    /fine_label_names.txt

Either way a sample's bytes are the binary layout's 3074-byte record, so one dataset stages,
stores and exchanges the same bytes whichever layout it came in; the pixels are the red, green
and blue 32 × 32 planes, row-major. Labels are the fine labels.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from hpcshuffle.errors import at_least
from hpcshuffle.formats.catalog import (
    Catalog,
    DatasetError,
    SourceFile,
    changed_since_listing,
)
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions, SampleError
from hpcshuffle.formats.synthetic import class_image

if TYPE_CHECKING:
    import torch

SPLITS = ("train", "test")
LAYOUTS = ("python", "binary")
LAYOUT_DIRS = {"python": "cifar-100-python", "binary": "cifar-100-binary"}
CLASS_NAMES = {"python": "meta", "binary": "fine_label_names.txt"}  # also what marks a layout's directory
SIDE = 32
PIXEL_BYTES = 3 * SIDE * SIDE
RECORD_BYTES = 2 + PIXEL_BYTES
MAX_CLASSES = 100
FINE_PER_COARSE = 5  # CIFAR-100: 20 superclasses of 5 classes
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

# container path -> (its mtime_ns when read, its records (N, 3074) uint8). Catalogs are pickled
# to every rank and loader worker, so the pixels live here, once per process, not on them.
_RECORDS: dict[Path, tuple[int, np.ndarray]] = {}
_RECORDS_LOCK = threading.Lock()  # staging reads records from many threads; load each container once


def _reset_lock_after_fork() -> None:
    global _RECORDS_LOCK
    _RECORDS_LOCK = threading.Lock()  # a fork while another thread held it must not deadlock the child


os.register_at_fork(after_in_child=_reset_lock_after_fork)


def container_name(layout: str, split: str) -> str:
    """A split's container file name in `layout`: ``train`` (python) or ``train.bin`` (binary)."""
    return split if layout == "python" else f"{split}.bin"


def find_layout(root: Path) -> tuple[Path, str]:
    """The directory holding the containers, and its layout (python first if both are there)."""
    for directory in (root, *(root / name for name in LAYOUT_DIRS.values())):
        for layout in LAYOUTS:
            if (directory / CLASS_NAMES[layout]).is_file():
                return directory, layout
    raise DatasetError(
        f"no CIFAR-100 dataset under {root}: expected {root}/cifar-100-python/{{train,test,meta}} or "
        f"{root}/cifar-100-binary/{{train.bin,test.bin,fine_label_names.txt}} (or root being one of "
        f"those directories); create one with `hpcshuffle synth cifar --out {root} --samples N` or set dataset.root"
    )


def _unpickle(path: Path) -> dict[str, object]:
    """A CIFAR pickle (Python 2 strings load as bytes) as a dict with str keys."""
    with open(path, "rb") as source:
        batch = pickle.load(source, encoding="bytes")
    return {key.decode() if isinstance(key, bytes) else key: value for key, value in batch.items()}


def read_class_names(directory: Path, layout: str) -> tuple[str, ...]:
    """The fine label names of the dataset in `directory`; DatasetError if unreadable or empty."""
    path = directory / CLASS_NAMES[layout]
    try:
        if layout == "binary":
            names = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        else:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in _unpickle(path)["fine_label_names"]]
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, AttributeError, TypeError, ValueError) as err:
        raise DatasetError(f"cannot read CIFAR-100 class names from {path}: {err!r}") from None
    if not names:
        raise DatasetError(f"{path} names no classes")
    return tuple(names)


def read_container(path: Path, layout: str) -> np.ndarray:
    """All records of a container file as (N, 3074) uint8, read into memory.

    Not memory-mapped: a container rewritten in place would turn a stale mapping into SIGBUS.
    """
    if layout == "binary":
        records = np.fromfile(path, dtype=np.uint8)
        if len(records) == 0 or len(records) % RECORD_BYTES:
            raise DatasetError(
                f"{path} is {len(records)} bytes, not a whole number of {RECORD_BYTES}-byte CIFAR-100 "
                "records (CIFAR-10's are 3073 bytes); is it truncated?"
            )
        return records.reshape(-1, RECORD_BYTES)
    try:
        batch = _unpickle(path)
        pixels = np.asarray(batch["data"], dtype=np.uint8)
        fine = np.asarray(batch["fine_labels"], dtype=np.int64)
        coarse = np.asarray(batch["coarse_labels"], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, AttributeError, TypeError, ValueError) as err:
        raise DatasetError(f"{path} is not a readable CIFAR-100 python batch: {err!r}") from None
    count = len(pixels)
    if pixels.shape != (count, PIXEL_BYTES) or fine.shape != (count,) or coarse.shape != (count,):
        raise DatasetError(
            f"{path}: data {pixels.shape}, fine_labels {fine.shape}, coarse_labels {coarse.shape}; "
            f"expected (N, {PIXEL_BYTES}), (N,), (N,)"
        )
    if count and (min(fine.min(), coarse.min()) < 0 or max(fine.max(), coarse.max()) > 255):
        raise DatasetError(f"{path} has labels outside 0..255")
    records = np.empty((count, RECORD_BYTES), dtype=np.uint8)
    records[:, 0], records[:, 1], records[:, 2:] = coarse, fine, pixels
    return records


def load_records(path: Path, layout: str, mtime_ns: int) -> np.ndarray:
    """A container's records, read once per process and version of the file.

    Args:
        mtime_ns: the container's mtime when the split was listed; a file changed since then is
            a DatasetError, not records that no longer match the catalog's labels.
    """
    # a stat per read, no more than an ImageFolder's open per sample: staging records the mtime
    # it statted, so it must never be handed the bytes of another version of the container
    if path.stat().st_mtime_ns != mtime_ns:
        raise changed_since_listing(path)
    with _RECORDS_LOCK:
        cached = _RECORDS.get(path)
        if cached is None or cached[0] != mtime_ns:
            cached = _RECORDS[path] = (mtime_ns, read_container(path, layout))  # drops an older version's
        return cached[1]


@dataclass(frozen=True)
class CifarCatalog(Catalog):
    """A CIFAR-100 split: sample i is record i of `root / container`.

    `relpaths` are virtual (``train/00012.cifar``), so a store keeps a sample as ``<id>.cifar``.
    The records are never kept here: a catalog is pickled to every rank and loader worker, so it
    stays as small as its names and labels, and each process reads the container once.

    Attributes:
        container: the split's file name in `root` (``train`` or ``train.bin``).
        layout: "python" or "binary".
        container_mtime_ns: the container's mtime when listed.
    """

    container: str
    layout: str
    container_mtime_ns: int

    def path(self, sample_id: int) -> Path:
        return self.root / self.container

    def stat(self, sample_id: int) -> SourceFile:
        return SourceFile(RECORD_BYTES, os.stat(self.path(sample_id)).st_mtime_ns)

    def read_chunks(self, sample_id: int) -> Iterator[bytes]:
        if not 0 <= sample_id < len(self):
            raise IndexError(f"sample {sample_id} is not in {self.path(0)} ({len(self)} records)")
        records = load_records(self.path(sample_id), self.layout, self.container_mtime_ns)
        return iter((records[sample_id].tobytes(),))


def scan(root: str | Path, split: str) -> CifarCatalog:
    """List a split's records; labels are the fine labels, classes the fine label names."""
    if split not in SPLITS:
        raise DatasetError(f"CIFAR-100 splits are {SPLITS}, not {split!r}")
    directory, layout = find_layout(Path(root))
    classes = read_class_names(directory, layout)
    container = directory / container_name(layout, split)
    if not container.is_file():
        raise DatasetError(f"CIFAR-100 split {container} not found next to {directory / CLASS_NAMES[layout]}")
    mtime_ns = container.stat().st_mtime_ns
    labels = load_records(container, layout, mtime_ns)[:, 1]
    if len(labels) == 0:
        raise DatasetError(f"{container} holds no records")
    if labels.max() >= len(classes):
        raise DatasetError(
            f"{container} has fine label {labels.max()} but {CLASS_NAMES[layout]} names {len(classes)} classes"
        )
    digits = max(5, len(str(len(labels) - 1)))
    relpaths = tuple(f"{split}/{index:0{digits}d}.cifar" for index in range(len(labels)))
    return CifarCatalog(directory, classes, relpaths, tuple(labels.tolist()), container.name, layout, mtime_ns)


class CifarCodec:
    """A 3074-byte record → (3, 32, 32) float32 normalised with CIFAR-100's mean and std, and the label.

    `standard` is the WRN recipe: RandomCrop(32, padding=4) + horizontal flips. An `image_size`
    other than 32 resizes after augmentation (for models built for larger inputs).
    """

    task = "classify"
    in_channels = 3

    def __init__(self, num_classes: int, options: DatasetOptions) -> None:
        import torch
        from torchvision.transforms import v2

        self.num_classes = num_classes
        augment = {
            "standard": [v2.RandomCrop(SIDE, padding=4), v2.RandomHorizontalFlip()],
            "flip": [v2.RandomHorizontalFlip()],
            "none": [],
        }[options.augment]
        resize = [] if options.image_size in (None, SIDE) else [v2.Resize(options.image_size, antialias=True)]
        to_input = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR100_MEAN, CIFAR100_STD)]
        self.train_transform = v2.Compose([*augment, *resize, *to_input])
        self.eval_transform = v2.Compose([*resize, *to_input])

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int]:
        """(input (3, S, S) float32, S = 32 or dataset.image_size, label); SampleError unless `data`
        is one record whose fine label is `label`."""
        import torch

        if len(data) != RECORD_BYTES:
            raise SampleError(f"a CIFAR-100 record is {RECORD_BYTES} bytes, got {len(data)}")
        if data[1] != label:
            raise SampleError(
                f"record's fine label {data[1]} differs from the catalog's {label}; was the dataset replaced?"
            )
        pixels = torch.frombuffer(bytearray(data), dtype=torch.uint8)[2:].view(3, SIDE, SIDE)
        return (self.train_transform if train else self.eval_transform)(pixels), label


def make_codec(root: Path, train_catalog: Catalog, options: DatasetOptions) -> CifarCodec:
    """The codec for the training split's classes (`DatasetFormat.codec`)."""
    return CifarCodec(len(train_catalog.classes), options)


# -- synthetic ---------------------------------------------------------------------------------


def synth_records(num_records: int, num_classes: int, rng: np.random.Generator, bar: tqdm) -> np.ndarray:
    """(N, 3074) uint8 learnable records, classes balanced and in random order as in CIFAR."""
    labels = rng.permutation(np.arange(num_records) % num_classes)
    records = np.empty((num_records, RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = labels // FINE_PER_COARSE
    records[:, 1] = labels
    for index, label in enumerate(labels.tolist()):
        records[index, 2:] = class_image(label, num_classes, SIDE, rng).transpose(2, 0, 1).ravel()
        bar.update()
    return records


def write_container(path: Path, layout: str, split: str, records: np.ndarray) -> None:
    """Write `records` (N, 3074) uint8 as a split's container in `layout`, as the distributed files are."""
    if layout == "binary":
        path.write_bytes(records.tobytes())
        return
    batch = {
        b"batch_label": f"{'training' if split == 'train' else 'testing'} batch 1 of 1".encode(),
        b"filenames": [f"synthetic_{index:05d}.png".encode() for index in range(len(records))],
        b"fine_labels": records[:, 1].tolist(),
        b"coarse_labels": records[:, 0].tolist(),
        b"data": np.ascontiguousarray(records[:, 2:]),
    }
    with open(path, "wb") as out:
        pickle.dump(batch, out, protocol=2)  # protocol 2, as the distributed (Python 2) files


def write_class_names(directory: Path, layout: str, num_classes: int) -> None:
    """Write `num_classes` fine and their coarse label names in `layout`'s file(s) in `directory`."""
    fine = [f"class_{label:03d}" for label in range(num_classes)]
    coarse = [f"superclass_{group:02d}" for group in range(-(-num_classes // FINE_PER_COARSE))]
    if layout == "binary":
        (directory / "fine_label_names.txt").write_text("\n".join(fine) + "\n")
        (directory / "coarse_label_names.txt").write_text("\n".join(coarse) + "\n")
        return
    meta = {b"fine_label_names": [n.encode() for n in fine], b"coarse_label_names": [n.encode() for n in coarse]}
    with open(directory / "meta", "wb") as out:
        pickle.dump(meta, out, protocol=2)


def synthesize(
    out: str | Path, *, seed: int, progress: bool, samples: int, val_samples: int | None = None,
    classes: int = MAX_CLASSES, layout: str = "python",
) -> Path:
    """Write `out/cifar-100-{layout}/` with `samples` training and `val_samples` (default
    max(classes, samples/5)) test records; the same seed gives the same records in either layout.

    Returns:
        The dataset root, `out`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"--layout must be one of {LAYOUTS}, got {layout!r}")
    if not 2 <= classes <= MAX_CLASSES:
        raise ValueError(f"--classes must be in [2, {MAX_CLASSES}] (CIFAR-100's fine labels), got {classes}")
    if samples < classes:
        raise ValueError(f"--samples ({samples}) must be >= --classes ({classes})")
    val_samples = max(classes, samples // 5) if val_samples is None else val_samples
    at_least("--val-samples", val_samples)
    out = Path(out)
    directory = out / LAYOUT_DIRS[layout]
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with tqdm(total=samples + val_samples, desc=f"synth {directory}", unit="img", disable=not progress) as bar:
        for split, count in zip(SPLITS, (samples, val_samples)):
            records = synth_records(count, classes, rng, bar)
            write_container(directory / container_name(layout, split), layout, split, records)
    write_class_names(directory, layout, classes)
    return out


FORMAT = DatasetFormat(SPLITS, scan, make_codec, synthesize)
