"""Synthetic, learnable datasets in the real on-disk formats.

Each class gets its own colour and stripe orientation, blurred by per-image noise, shifts and
brightness changes, so a small CNN learns it in a few epochs but not in one batch.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from hpcshuffle.errors import at_least

# bump when the images change, so a dataset made by an older generator is not taken for current
GENERATOR_VERSION = 2


def class_image(label: int, num_classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """An (size, size, 3) uint8 image whose colour and stripes depend on `label`."""
    hue = 2 * np.pi * label / num_classes
    colour = 0.5 + 0.12 * np.cos(hue + np.array([0.0, 2.1, 4.2]))
    angle = np.pi * label / num_classes + rng.normal(0, 0.3)
    period = size / (2 + label % 3)
    ys, xs = np.mgrid[0:size, 0:size]
    phase = rng.uniform(0, 2 * np.pi)
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * (xs * np.cos(angle) + ys * np.sin(angle)) / period + phase)
    brightness = rng.uniform(0.7, 1.1)
    image = brightness * (0.55 * colour + 0.45 * stripes[..., None] * colour[::-1])
    image += rng.normal(0, 0.3, size=image.shape)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def jpeg_bytes(pixels: np.ndarray, quality: int = 90) -> bytes:
    """`pixels`, (H, W, 3) uint8, encoded as a JPEG of `quality`."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def check_image_spec(num_samples: int, num_classes: int, num_val_samples: int | None, image_size: int) -> int:
    """Check a synthetic image dataset's size before anything is written; returns the validation
    count (default max(classes, samples/5))."""
    if num_samples < num_classes:
        raise ValueError(f"--samples ({num_samples}) must be >= --classes ({num_classes})")
    at_least("--classes", num_classes, 2)
    at_least("--size", image_size, 8, "pixels")
    num_val_samples = max(num_classes, num_samples // 5) if num_val_samples is None else num_val_samples
    at_least("--val-samples", num_val_samples)
    return num_val_samples


def synth_imagefolder(
    out: str | Path,
    num_samples: int,
    num_classes: int = 10,
    num_val_samples: int | None = None,
    image_size: int = 32,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Write `out/train/<class>/<n>.jpg` (num_samples) and `out/val/...` (default N/5) JPEGs.

    Returns:
        The dataset root, `out`.
    """
    num_val_samples = check_image_spec(num_samples, num_classes, num_val_samples, image_size)
    out = Path(out)
    rng = np.random.default_rng(seed)
    jobs = [("train", i) for i in range(num_samples)] + [("val", i) for i in range(num_val_samples)]
    for split in ("train", "val"):
        for label in range(num_classes):
            (out / split / f"class_{label:03d}").mkdir(parents=True, exist_ok=True)
    for split, index in tqdm(jobs, desc=f"synth {out}", unit="img", disable=not progress):
        label = index % num_classes
        pixels = class_image(label, num_classes, image_size, rng)
        (out / split / f"class_{label:03d}" / f"{index:07d}.jpg").write_bytes(jpeg_bytes(pixels))
    return out
