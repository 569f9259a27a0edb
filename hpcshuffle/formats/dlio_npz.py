"""DLIO's npz layout (`dataset=dlio_npz`): `<root>/{train,valid}/[<subfolder>/]<prefix>_<i>_of_<n>.npz`,
each file `np.savez(x=uint8 (H, W, samples), y=[label] * samples)`, as `dlio_benchmark`'s data
generator writes it (its unet3d workloads). hpcshuffle reads the same files DLIO's benchmark reads,
so that the two loaders can be measured on one dataset (benchmarks/peers.py, docs/peers.md).

A file is one sample (DLIO's `num_samples_per_file: 1`, every unet3d workload's); a file of several
fails to decode, naming the setting. Labels live in the files (DLIO writes 0 for every sample), so
the listing labels every sample 0 and `class_labels` is off. The codec hands the model the array as
it is stored, (1, H, W) float32 in [0, 1]; DLIO's own reader resizes nothing either (it returns a
stand-in array of `record_length_resize` bytes).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from hpcshuffle.errors import at_least
from hpcshuffle.formats.catalog import Catalog, DatasetError, find_split
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions, SampleError

if TYPE_CHECKING:
    import torch

SPLITS = ("train", "valid")
CLASSES = ("sample",)  # DLIO's labels are all 0: one class
PREFIX = "img"  # DLIO's `dataset.file_prefix` default


def scan(root: str | Path, split: str) -> Catalog:
    """List `root/split/**/*.npz` in sorted path order (DLIO's zero-padded names: its file order)."""
    root = Path(root)
    split_dir = find_split(
        root, split, "DLIO npz", f"DLIO's layout {root}/{{train,valid}}/*.npz — generate it with `dlio_benchmark "
        f"++workload.workflow.generate_data=True ++workload.dataset.data_folder={root}` or "
        f"`hpcshuffle synth dlio_npz --out {root}`"
    )
    relpaths = tuple(sorted(str(path.relative_to(root)) for path in split_dir.rglob("*.npz")))
    if not relpaths:
        # DLIO makes valid/ empty unless asked for evaluation files; hpcshuffle validates every epoch
        fix = " (generate DLIO's with ++workload.dataset.num_files_eval=N, N >= the ranks)" if split == SPLITS[1] else ""
        raise DatasetError(f"{split_dir} holds no .npz files{fix}")
    return Catalog(root, CLASSES, relpaths, (0,) * len(relpaths))


class NpzCodec:
    """An npz file's `x` (H, W, 1) uint8 → (1, H, W) float32 in [0, 1], and its `y` label; no augmentation
    (DLIO's data is random bytes)."""

    task = "classify"
    in_channels = 1
    num_classes = len(CLASSES)

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int]:
        """(input, label from the file); SampleError for bytes that are not one sample of DLIO's npz layout."""
        import torch

        try:
            with np.load(io.BytesIO(data)) as arrays:
                x, y = arrays["x"], arrays["y"]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as err:
            raise SampleError(f"not an npz file with arrays x and y ({len(data)} bytes): {err}") from None
        if x.ndim != 3 or x.dtype != np.uint8:
            raise SampleError(f"x is {x.dtype} of shape {x.shape}, not DLIO's uint8 (H, W, samples)")
        if x.shape[2] != 1:
            raise SampleError(f"the file holds {x.shape[2]} samples; hpcshuffle reads DLIO npz files of one sample "
                              "each: generate with ++workload.dataset.num_samples_per_file=1")
        image = torch.from_numpy(np.ascontiguousarray(x[:, :, 0])).unsqueeze(0)
        return image.to(torch.float32).div_(255.0), int(y[0])


def make_codec(root: Path, train_catalog: Catalog, options: DatasetOptions) -> NpzCodec:
    """The codec (`DatasetFormat.codec`); DLIO's samples take no options."""
    return NpzCodec()


def synthesize(out: str | Path, *, seed: int, progress: bool, samples: int, side: int = 64,
               val_samples: int | None = None) -> Path:
    """Write DLIO's npz layout as its generator does, `samples` training and `val_samples` (default
    samples/5) validation files of one random `side` × `side` uint8 sample each, label 0; returns `out`.
    For tests and runs without DLIO installed; the benchmark reads files DLIO itself generated."""
    at_least("samples", samples)
    val_samples = max(1, samples // 5) if val_samples is None else val_samples
    at_least("val_samples", val_samples)
    at_least("side", side, 8, "pixels")
    out = Path(out)
    rng = np.random.default_rng(seed)
    jobs = [(SPLITS[0], i, samples) for i in range(samples)] + [(SPLITS[1], i, val_samples) for i in range(val_samples)]
    for split, index, count in tqdm(jobs, desc=f"dlio_npz {out}", unit="file", disable=not progress):
        (out / split).mkdir(parents=True, exist_ok=True)
        x = rng.integers(0, 255, size=(side, side, 1), dtype=np.uint8)
        np.savez(out / split / f"{PREFIX}_{index:0{len(str(count))}d}_of_{count}.npz", x=x, y=np.zeros(1, np.int64))
    return out


FORMAT = DatasetFormat(SPLITS, scan, make_codec, synthesize, class_labels=False)
