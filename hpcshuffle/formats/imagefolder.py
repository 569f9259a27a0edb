"""ImageFolder datasets (ImageNet layout): ``<root>/{train,val}/<class>/<image>.{jpg,jpeg,png}``.

Sample ids are positions in the sorted list of training files, so every rank that scans the
same tree numbers it the same way; `Catalog.fingerprint` lets ranks check that they did.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from hpcshuffle.formats.catalog import Catalog, DatasetError, find_split
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions, SampleError
from hpcshuffle.formats.synthetic import synth_imagefolder

if TYPE_CHECKING:
    import torch

__all__ = ["FORMAT", "IMAGE_SUFFIXES", "Catalog", "DatasetError", "ImageFolderCodec", "scan", "scan_split"]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
SPLITS = ("train", "val")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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
        resize = [] if size is None else [v2.Resize((size, size), antialias=True)]
        if options.augment == "standard":
            train = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
            evaluate = [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
        elif options.augment == "flip":
            train, evaluate = [*resize, v2.RandomHorizontalFlip()], resize
        else:
            train = evaluate = resize
        to_input = [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        self.train_transform = v2.Compose([*train, *to_input])
        self.eval_transform = v2.Compose([*evaluate, *to_input])

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int]:
        """(input (3, H, W) float32 normalised with ImageNet's mean and std, label); SampleError for bytes
        that are not a readable JPEG/PNG."""
        try:
            with Image.open(io.BytesIO(data)) as image:
                image = image.convert("RGB")  # decodes the whole image: truncation shows here
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise SampleError(f"not a readable JPEG/PNG image ({len(data)} bytes): {err}") from None
        return (self.train_transform if train else self.eval_transform)(image), label


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
