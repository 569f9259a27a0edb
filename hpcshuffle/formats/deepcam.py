"""DeepCAM climate data, one HDF5 file per sample: ``<root>/{train,validation}/*.h5`` + ``<root>/stats.h5``.

Each file holds ``climate/data`` (H, W, 16) float32 (768 × 1152 in the MLPerf-HPC set) and
``climate/labels_0`` (H, W): 0 background, 1 tropical cyclone, 2 atmospheric river. Staging and
the exchange move the files whole; the codec normalises each channel to [0, 1] over the
training set's range, from ``stats.h5`` (``climate/{minval,maxval,mean,sqmean}``, one value
per channel), as the MLPerf-HPC reference does.
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import h5py
import numpy as np
from tqdm import tqdm

from hpcshuffle.errors import at_least
from hpcshuffle.formats.catalog import Catalog, DatasetError, find_split
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions, SampleError

if TYPE_CHECKING:
    import torch

SPLITS = ("train", "validation")
CHANNELS = 16
NUM_CLASSES = 3
STATS_FILE = "stats.h5"
STATS = ("minval", "maxval", "mean", "sqmean")
SIDE_MULTIPLE = 16  # the DeepLabv3+ encoder downsamples by 16


def scan(root: str | Path, split: str) -> Catalog:
    """List `root/split/*.h5` in name order; labels are inside the files, so all are 0."""
    root = Path(root)
    split_dir = find_split(root, split, "DeepCAM", f"{root}/{{train,validation}}/*.h5")
    relpaths = tuple(f"{split}/{path.name}" for path in sorted(split_dir.glob("*.h5")))
    if not relpaths:
        raise DatasetError(f"{split_dir} holds no .h5 files")
    return Catalog(root, (), relpaths, (0,) * len(relpaths))


def read_stats(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(minval, maxval), each (16,) float32, from `root/stats.h5`."""
    path = Path(root) / STATS_FILE
    fix = (
        f"copy the dataset's {STATS_FILE} to {root}, or for synthetic data regenerate it with "
        f"`hpcshuffle synth deepcam --out {root} --samples N`"
    )
    if not path.is_file():
        raise DatasetError(f"DeepCAM statistics {path} not found; {fix}")
    try:
        with h5py.File(path, "r") as stats:
            minval, maxval = (np.asarray(stats[f"climate/{name}"], dtype=np.float32) for name in ("minval", "maxval"))
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise DatasetError(f"DeepCAM statistics {path} are unreadable ({err}); {fix}") from None
    if minval.shape != (CHANNELS,) or maxval.shape != (CHANNELS,):
        raise DatasetError(
            f"{path}: climate/minval {minval.shape} and climate/maxval {maxval.shape} must both be "
            f"({CHANNELS},), one value per channel; {fix}"
        )
    flat = np.flatnonzero(~(maxval > minval))  # also catches NaN
    if flat.size:
        raise DatasetError(f"{path}: maxval <= minval for channels {flat.tolist()}; {fix}")
    return minval, maxval


def read_sample(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(fields (H, W, 16) float32, labels (H, W) int64) from one sample file's bytes."""
    try:
        with h5py.File(io.BytesIO(data), "r") as sample:
            arrays = []
            for name in ("climate/data", "climate/labels_0"):
                if not isinstance(sample.get(name), h5py.Dataset):
                    raise SampleError(f"HDF5 sample has no {name} dataset")
                arrays.append(sample[name][...])
    except SampleError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
        raise SampleError(f"not a readable HDF5 sample ({len(data)} bytes; truncated or corrupt?): {err}") from None
    fields, labels = arrays
    if fields.ndim != 3 or fields.shape[2] != CHANNELS:
        raise SampleError(f"climate/data has shape {fields.shape}; expected (H, W, {CHANNELS})")
    if labels.shape != fields.shape[:2]:
        raise SampleError(f"climate/labels_0 has shape {labels.shape}; expected {fields.shape[:2]} like climate/data")
    labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        raise SampleError(
            f"climate/labels_0 holds classes {labels.min()}..{labels.max()}; expected 0..{NUM_CLASSES - 1}"
        )
    return fields.astype(np.float32, copy=False), labels


class DeepCamCodec:
    """An HDF5 sample → ((16, H, W) float32 scaled by (x - minval) / (maxval - minval), (H, W) int64).

    The reference trains without augmentation, so `standard` is none; `flip` mirrors fields and
    labels together (east-west).
    """

    task = "segment"
    in_channels = CHANNELS
    num_classes = NUM_CLASSES

    def __init__(self, minval: np.ndarray, maxval: np.ndarray, options: DatasetOptions) -> None:
        if options.image_size is not None:
            raise ValueError(
                f"DeepCAM samples keep their stored H × W; set dataset.image_size=null, got {options.image_size}"
            )
        self.minval = minval
        self.span = maxval - minval
        self.flip = options.augment == "flip"

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(fields (16, H, W) float32 scaled to [0, 1] by the dataset's min and max, labels (H, W)
        int64); training with `augment=flip` flips both east-west half the time. `label` is unused."""
        import torch

        fields, labels = read_sample(data)
        channels_first = np.ascontiguousarray(fields.transpose(2, 0, 1))  # one copy, then in place
        channels_first -= self.minval[:, None, None]
        channels_first /= self.span[:, None, None]  # division, not a reciprocal: training data stays in [0, 1]
        inputs, target = torch.from_numpy(channels_first), torch.from_numpy(labels)
        if train and self.flip and torch.rand(1).item() < 0.5:
            inputs, target = inputs.flip(-1), target.flip(-1)
        return inputs, target


def make_codec(root: Path, train_catalog: Catalog, options: DatasetOptions) -> DeepCamCodec:
    """The codec with the per-channel min and max of `root/stats.h5` (DatasetError if unreadable)."""
    return DeepCamCodec(*read_stats(root), options)


# -- synthetic ---------------------------------------------------------------------------------

# The 16 CAM5 variables in the benchmark's channel order, with a rough mean and spread each, so
# channels differ in scale by orders of magnitude as the real ones do and normalisation matters.
VARIABLES = (
    ("TMQ", 20.0, 15.0), ("U850", 0.0, 10.0), ("V850", 0.0, 8.0), ("UBOT", 0.0, 8.0),
    ("VBOT", 0.0, 6.0), ("QREFHT", 0.01, 0.005), ("PS", 97000.0, 5000.0), ("PSL", 101000.0, 1500.0),
    ("T200", 215.0, 5.0), ("T500", 255.0, 10.0), ("PRECT", 3e-8, 6e-8), ("TS", 285.0, 20.0),
    ("TREFHT", 283.0, 18.0), ("Z1000", 100.0, 150.0), ("Z200", 11800.0, 300.0), ("ZBOT", 60.0, 5.0),
)
CHANNEL = {name: index for index, (name, _, _) in enumerate(VARIABLES)}
# how a feature shifts channels, in spreads: cyclones are windy, wet and low-pressure cores;
# atmospheric rivers are long bands of water vapour carried poleward
SIGNATURES = {
    1: {"TMQ": 2.0, "U850": 3.0, "V850": 3.0, "UBOT": 3.0, "VBOT": 3.0, "PS": -2.5, "PSL": -3.0, "PRECT": 3.0},
    2: {"TMQ": 3.0, "QREFHT": 2.0, "V850": 2.0, "PRECT": 1.5},
}


def smooth_noise(rng: np.random.Generator, height: int, width: int, cell: int) -> np.ndarray:
    """(H, W, 16) float32 noise that varies over `cell` pixels (bilinear over a coarse grid)."""
    coarse = rng.standard_normal((height // cell + 2, width // cell + 2, CHANNELS)).astype(np.float32)
    ys, xs = np.arange(height) / cell, np.arange(width) / cell
    y0, x0 = ys.astype(int), xs.astype(int)
    fy, fx = (ys - y0).astype(np.float32)[:, None, None], (xs - x0).astype(np.float32)[None, :, None]
    rows = coarse[y0] * (1 - fy) + coarse[y0 + 1] * fy
    return rows[:, x0] * (1 - fx) + rows[:, x0 + 1] * fx


def feature_strengths(rng: np.random.Generator, height: int, width: int) -> dict[int, np.ndarray]:
    """Per class 1 (cyclones: 1–3 discs) and 2 (rivers: 1–2 slanted bands), (H, W) float32 in
    [0, 1], 0 outside the features. Sized so that at 768 × 1152 they cover roughly the real
    shares (≈ 0.05 % and ≈ 1.3 %), and at small sizes still several pixels each."""
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    strengths = {1: np.zeros((height, width), np.float32), 2: np.zeros((height, width), np.float32)}
    radius = max(2.5, 0.01 * height)
    for _ in range(rng.integers(1, 4)):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        distance = np.hypot(ys - cy, xs - cx) / radius
        np.maximum(strengths[1], np.clip(1.5 - distance, 0, 1) * (distance < 1), out=strengths[1])
    half_width = max(1.5, 0.012 * height)
    for _ in range(rng.integers(1, 3)):
        length, angle = rng.uniform(0.25, 0.45) * width, rng.uniform(-1.0, 1.0)
        start = np.array([rng.uniform(0, height), rng.uniform(0, width)], np.float32)
        step = length * np.array([np.sin(angle), np.cos(angle)], np.float32)
        along = np.clip(((ys - start[0]) * step[0] + (xs - start[1]) * step[1]) / (step @ step), 0, 1)
        distance = np.hypot(ys - start[0] - along * step[0], xs - start[1] - along * step[1]) / half_width
        np.maximum(strengths[2], np.clip(1.5 - distance, 0, 1) * (distance < 1), out=strengths[2])
    return strengths


def synth_sample(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(climate/data (H, W, 16) float32, climate/labels_0 (H, W) int8) with learnable features."""
    spread = np.array([s for _, _, s in VARIABLES], np.float32)
    mean = np.array([m for _, m, _ in VARIABLES], np.float32)
    standard = smooth_noise(rng, height, width, max(2, height // 12))
    standard *= 0.8
    standard += 0.3 * rng.standard_normal((height, width, CHANNELS), dtype=np.float32)
    labels = np.zeros((height, width), np.int8)
    strengths = feature_strengths(rng, height, width)
    for label in (2, 1):  # rivers first: a cyclone inside a river keeps the rarer label
        for name, shift in SIGNATURES[label].items():
            standard[..., CHANNEL[name]] += shift * strengths[label]
        labels[strengths[label] > 0] = label
    standard *= spread
    standard += mean
    return standard, labels


def sample_name(index: int) -> str:
    """The reference's `data-YYYY-MM-DD-HH-1.h5`: one file every 3 hours of a CAM5 run from 2106."""
    return f"data-{datetime(2106, 1, 1) + timedelta(hours=3 * index):%Y-%m-%d-%H}-1.h5"


def write_hdf5(path: Path | io.BytesIO, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` as datasets of an HDF5 file (or in-memory buffer), keyed by their path names."""
    with h5py.File(path, "w") as out:
        for name, array in arrays.items():
            out[name] = array


def sample_bytes(fields: np.ndarray, labels: np.ndarray) -> bytes:
    """One sample as the bytes of a per-sample DeepCAM file (what `read_sample` reads); the
    same arrays always give the same bytes, and arrays of one shape and dtype the same size."""
    buffer = io.BytesIO()
    write_hdf5(buffer, {"climate/data": fields, "climate/labels_0": labels})
    return buffer.getvalue()


def check_spec(samples: int, val_samples: int | None, height: int, width: int) -> int:
    """Check a synthetic dataset's size before anything is written; returns the validation count."""
    if min(height, width) < SIDE_MULTIPLE or height % SIDE_MULTIPLE or width % SIDE_MULTIPLE:
        raise ValueError(
            f"--height and --width must be positive multiples of {SIDE_MULTIPLE} (the model "
            f"downsamples by {SIDE_MULTIPLE}), got {height} x {width}"
        )
    at_least("--samples", samples)
    val_samples = max(1, samples // 5) if val_samples is None else val_samples
    at_least("--val-samples", val_samples)
    return val_samples


class ChannelStats:
    """Per-channel min, max, mean and mean square over the training samples, as stats.h5 holds them."""

    def __init__(self) -> None:
        self.minval = np.full(CHANNELS, np.inf, np.float32)
        self.maxval = np.full(CHANNELS, -np.inf, np.float32)
        self.total, self.total_sq = np.zeros(CHANNELS), np.zeros(CHANNELS)
        self.count = 0

    def add(self, fields: np.ndarray) -> None:
        """Take in one training sample's (H, W, 16) fields."""
        np.minimum(self.minval, fields.min(axis=(0, 1)), out=self.minval)
        np.maximum(self.maxval, fields.max(axis=(0, 1)), out=self.maxval)
        self.total += fields.sum(axis=(0, 1), dtype=np.float64)
        self.total_sq += np.square(fields, dtype=np.float64).sum(axis=(0, 1))
        self.count += fields.shape[0] * fields.shape[1]

    def write(self, root: Path) -> None:
        """`root/stats.h5`, as `read_stats` reads it."""
        stats = {"minval": self.minval, "maxval": self.maxval, "mean": self.total / self.count,
                 "sqmean": self.total_sq / self.count}
        write_hdf5(root / STATS_FILE, {f"climate/{name}": stats[name].astype(np.float32) for name in STATS})


def synthesize(
    out: str | Path, *, seed: int, progress: bool, samples: int, val_samples: int | None = None,
    height: int = 768, width: int = 1152,
) -> Path:
    """Write `samples` files to `out/train`, `val_samples` (default max(1, samples/5)) to
    `out/validation`, and `out/stats.h5` computed from the training files.

    Returns:
        The dataset root, `out`.
    """
    val_samples = check_spec(samples, val_samples, height, width)
    out = Path(out)
    for split in SPLITS:
        (out / split).mkdir(parents=True, exist_ok=True)
    jobs = [(SPLITS[0], index) for index in range(samples)] + [(SPLITS[1], samples + i) for i in range(val_samples)]
    stats = ChannelStats()
    for split, index in tqdm(jobs, desc=f"synth {out}", unit="file", disable=not progress):
        fields, labels = synth_sample(np.random.default_rng([seed, index]), height, width)
        write_hdf5(out / split / sample_name(index), {"climate/data": fields, "climate/labels_0": labels})
        if split == SPLITS[0]:
            stats.add(fields)
    stats.write(out)
    return out


FORMAT = DatasetFormat(SPLITS, scan, make_codec, synthesize, class_labels=False)
