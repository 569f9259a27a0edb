"""Real handwritten digits as an ImageFolder: scikit-learn's `load_digits` (1,797 8×8 grey images
of 0-9 from 43 writers, UCI), which ships inside the scikit-learn package, so no download is needed.

`synthesize` writes them once as `<root>/{train,val}/digit_<d>/<n>.png`, upscaled to `size` × `size`
RGB so the models that take the synthetic 32×32 images take them too; the split holds out
`val_fraction` of every class, drawn by `seed`. On disk it is an ImageFolder in every way (listed and
decoded as one); the format's name says where the images came from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from hpcshuffle.errors import at_least
from hpcshuffle.formats import imagefolder
from hpcshuffle.formats.codec import DatasetFormat

CLASSES = tuple(f"digit_{d}" for d in range(10))


def load() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float in 0..16, targets (1797,) in 0..9), from the scikit-learn package."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError(
            "the digits dataset comes with scikit-learn, which is not installed: pip install scikit-learn "
            "(`make install` installs it)"
        ) from None
    digits = load_digits()
    return digits.images, digits.target


def split(targets: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, validation indices) into `targets`: round(val_fraction · n_c) of each
    class's n_c images, drawn by `seed`, are held out; each list is sorted by (class, index), the
    order the ImageFolder listing gives back."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    rng = np.random.default_rng(seed)
    train, val = [], []
    for digit in range(len(CLASSES)):
        members = np.flatnonzero(targets == digit)
        held = np.sort(rng.choice(members, size=round(val_fraction * len(members)), replace=False))
        val.extend(held)
        train.extend(np.setdiff1d(members, held))
    return np.array(train), np.array(val)


def train_labels(val_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """The training split's labels in listing order, without writing or reading an image."""
    _, targets = load()
    return targets[split(targets, val_fraction, seed)[0]]


def synthesize(out: str | Path, *, seed: int, progress: bool, size: int = 32, val_fraction: float = 0.2) -> Path:
    """Write the digits as PNGs under `out/{train,val}/digit_<d>/`; returns `out`."""
    at_least("size", size, 8, "pixels (the digits are 8 × 8)")
    images, targets = load()
    out = Path(out)
    train, val = split(targets, val_fraction, seed)

    def image_of(index: int) -> Image.Image:
        grey = Image.fromarray((images[index] * (255 / 16)).astype(np.uint8))
        return grey.resize((size, size), Image.Resampling.BILINEAR).convert("RGB")

    imagefolder.write_pngs(out, CLASSES, targets, dict(zip(imagefolder.SPLITS, (train, val))), image_of, 4, "digits",
                           progress)
    return out


FORMAT = DatasetFormat(imagefolder.SPLITS, imagefolder.scan_split, imagefolder.make_codec, synthesize)
