"""ImageFolder datasets (ImageNet layout): ``<root>/{train,val}/<class>/<image>.{jpg,jpeg,png}``.

Sample ids are positions in the sorted list of training files, so every rank that scans the
same tree numbers it the same way; `Catalog.fingerprint` lets ranks check that they did.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image
from tqdm import tqdm

from hpcshuffle.formats.catalog import Catalog, DatasetError, find_split
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions, SampleError
from hpcshuffle.formats.jpeg_batch import (
    Crop,
    RawImage,
    crop_batch,
    decode_jpegs,
    full_image,
)
from hpcshuffle.formats.synthetic import synth_imagefolder

if TYPE_CHECKING:
    import torch

__all__ = ["FORMAT", "IMAGE_SUFFIXES", "Catalog", "DatasetError", "ImageFolderCodec", "scan", "scan_split"]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
SPLITS = ("train", "val")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# what PIL raises for bytes that are not an image it can read (the CPU path and `encoded` alike)
UNREADABLE = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def scan(root: str | Path, split: str, classes: tuple[str, ...] | None = None) -> Catalog:
    """List `root/split/<class>/*` in a stable order.

    Args:
        classes: the class list to label with (pass the train split's to label `val` alike).
    """
    root = Path(root)
    split_dir = find_split(
        root, split, "dataset", f"an ImageFolder tree {root}/{{train,val}}/<class>/*.jpg — create one with "
        f"`hpcshuffle synth imagefolder --out {root}` or set dataset.root"
    )
    found = tuple(sorted(d.name for d in split_dir.iterdir() if d.is_dir()))
    classes = classes if classes is not None else found
    if not classes:
        raise DatasetError(f"{split_dir} has no class directories")
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise DatasetError(f"{split_dir} has classes not in the training split: {unknown[:5]}")
    relpaths, labels = [], []
    for label, name in enumerate(classes):
        class_dir = split_dir / name
        if not class_dir.is_dir():
            continue
        for path in sorted(class_dir.iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                relpaths.append(f"{split}/{name}/{path.name}")
                labels.append(label)
    if not relpaths:
        raise DatasetError(f"{split_dir} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return Catalog(root, classes, tuple(relpaths), tuple(labels))


def scan_split(root: str | Path, split: str) -> Catalog:
    """`scan` as the registry calls it: any other split is labelled with the training split's
    class directories, so a class missing from `val` does not shift the labels after it."""
    train_dir = Path(root) / SPLITS[0]
    if split == SPLITS[0] or not train_dir.is_dir():
        return scan(root, split)
    return scan(root, split, tuple(sorted(d.name for d in train_dir.iterdir() if d.is_dir())))


class ImageFolderCodec:
    """JPEG/PNG bytes → (3, S, S) float32 normalised with ImageNet's mean and std, and the label.

    Augmentation follows the torchvision ImageNet recipe: `standard` trains on
    RandomResizedCrop(S) + flips and validates on Resize(S·256/224) + CenterCrop(S); `flip` and
    `none` keep the stored size, or resize to S × S when `image_size` is given.

    A training sample's draws are one `Crop` (`draw_crop`), made by torchvision's own
    RandomResizedCrop and RandomHorizontalFlip draws in their order, so the CPU path here and
    the batched path (`encoded` in a loader worker, `decode_batch` where the model trains,
    jpeg_batch.py) crop and flip a sample alike under the same seed.
    """

    task = "classify"
    in_channels = 3

    def __init__(self, num_classes: int, options: DatasetOptions) -> None:
        import torch
        from torchvision.transforms import v2

        size = options.image_size
        if options.augment == "standard" and size is None:
            raise ValueError(
                "dataset.image_size must be set for ImageFolder data with dataset.augment=standard "
                "(its images vary in size; ImageNet uses 224), or use dataset.augment=flip|none to "
                "keep the stored size"
            )
        self.num_classes = num_classes
        self.augment = options.augment
        self.size = None if size is None else (size, size)
        self.random_crop = v2.RandomResizedCrop(size, antialias=True) if options.augment == "standard" else None
        if options.augment == "standard":
            evaluate = [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
        else:
            evaluate = [] if size is None else [v2.Resize((size, size), antialias=True)]
        to_input = [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        self.to_input = v2.Compose(to_input)
        self.eval_transform = v2.Compose([*evaluate, *to_input])

    def draw_crop(self, height: int, width: int) -> Crop:
        """A training sample's crop box and flip, drawn from torch's global RNG (seeded by the loader)."""
        import torch
        from torchvision import tv_tensors

        if self.random_crop is None:
            crop = full_image(height, width)
        else:  # torchvision's draw, sized by a stand-in that holds only the image's size
            stand_in = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(height, width))
            crop = Crop(**self.random_crop.make_params([stand_in]), flip=False)
        flip = self.augment != "none" and bool(torch.rand(1) < 0.5)  # RandomHorizontalFlip(0.5)'s draw
        return crop._replace(flip=flip)

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int]:
        """(input (3, H, W) float32 normalised with ImageNet's mean and std, label); SampleError for bytes
        that are not a readable JPEG/PNG."""
        try:
            with Image.open(io.BytesIO(data)) as image:
                image = image.convert("RGB")  # decodes the whole image: truncation shows here
        except UNREADABLE as err:
            raise SampleError(f"not a readable JPEG/PNG image ({len(data)} bytes): {err}") from None
        if not train:
            return self.eval_transform(image), label
        from torchvision.transforms.v2 import functional

        crop = self.draw_crop(image.height, image.width)
        if self.size is not None:  # else the box is the whole image, kept at its size
            image = functional.resized_crop(image, crop.top, crop.left, crop.height, crop.width, list(self.size),
                                            antialias=True)
        if crop.flip:
            image = functional.horizontal_flip(image)
        return self.to_input(image), label

    def encoded(self, data: bytes, label: int) -> tuple[RawImage, int]:
        """A training sample left encoded for `decode_batch`: its bytes and its drawn crop (reading
        only the JPEG's header); SampleError for bytes that are not a JPEG."""
        import torch

        try:
            with Image.open(io.BytesIO(data)) as image:
                kind, (width, height) = image.format, image.size
        except UNREADABLE as err:
            raise SampleError(f"not a readable JPEG image ({len(data)} bytes): {err}") from None
        if kind != "JPEG":
            raise SampleError(f"a {kind} image, but loader.decode=gpu decodes JPEG only; use loader.decode=cpu")
        return RawImage(torch.frombuffer(bytearray(data), dtype=torch.uint8), self.draw_crop(height, width)), label

    def decode_batch(self, raw: Sequence[torch.Tensor], crops: torch.Tensor, device: torch.device) -> torch.Tensor:
        """(N, 3, S, S) float32 inputs on `device` of N `encoded` samples (their bytes and their (N, 5)
        crop table); RuntimeError if one is not a decodable JPEG."""
        return crop_batch(decode_jpegs(raw, device), crops, self.size, IMAGENET_MEAN, IMAGENET_STD)


def write_pngs(out: Path, classes: Sequence[str], labels: np.ndarray, splits: dict[str, np.ndarray],
               image_of: Callable[[int], Image.Image], digits: int, desc: str, progress: bool) -> None:
    """Write a real dataset as an ImageFolder: for each split's indices i, `image_of(i)` as
    `out/<split>/<classes[labels[i]]>/<i, zero-padded to digits>.png` (every class directory made,
    even one a split has no image of)."""
    for split_name in splits:
        for name in classes:
            (out / split_name / name).mkdir(parents=True, exist_ok=True)
    jobs = [(split_name, index) for split_name, indices in splits.items() for index in indices]
    for split_name, index in tqdm(jobs, desc=f"{desc} {out}", unit="img", disable=not progress):
        image_of(index).save(out / split_name / classes[labels[index]] / f"{index:0{digits}d}.png")


def make_codec(root: Path, train_catalog: Catalog, options: DatasetOptions) -> ImageFolderCodec:
    """The codec for the training split's classes (`DatasetFormat.codec`)."""
    return ImageFolderCodec(len(train_catalog.classes), options)


def synthesize(
    out: str | Path, *, seed: int, progress: bool, samples: int, classes: int = 10, size: int = 32,
    val_samples: int | None = None,
) -> Path:
    """`synth_imagefolder` under the registry's keyword interface; returns the dataset root."""
    return synth_imagefolder(out, samples, classes, val_samples, size, seed, progress)


FORMAT = DatasetFormat(SPLITS, scan_split, make_codec, synthesize)
