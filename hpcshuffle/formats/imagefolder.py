"""ImageFolder datasets (ImageNet layout): ``<root>/{train,val}/<class>/<image>.{jpg,jpeg,png}``.

Sample ids are positions in the sorted list of training files, so every rank that scans the
same tree numbers it the same way; `Catalog.fingerprint` lets ranks check that they did.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.store import SampleMeta

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


class DatasetError(ValueError):
    """The dataset directory is missing or not laid out as expected."""


@dataclass(frozen=True)
class Catalog:
    """One split of an ImageFolder tree.

    Attributes:
        root: the dataset root (the directory holding `train/` and `val/`).
        classes: class directory names; a sample's label is the index of its class here.
        relpaths: per sample id, its path relative to `root`.
        labels: per sample id, its class index.
    """

    root: Path
    classes: tuple[str, ...]
    relpaths: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.relpaths)

    def meta(self, sample_id: int) -> SampleMeta:
        return SampleMeta(sample_id, self.relpaths[sample_id], self.labels[sample_id])

    def path(self, sample_id: int) -> Path:
        return self.root / self.relpaths[sample_id]

    def fingerprint(self) -> str:
        """A short hash of the listing (names and labels, not bytes)."""
        digest = hashlib.blake2b(digest_size=8)
        for relpath, label in zip(self.relpaths, self.labels):
            digest.update(f"{relpath}\0{label}\n".encode())
        return digest.hexdigest()


def scan(root: str | Path, split: str, classes: tuple[str, ...] | None = None) -> Catalog:
    """List `root/split/<class>/*` in a stable order.

    Args:
        classes: the class list to label with (pass the train split's to label `val` alike).
    """
    root = Path(root)
    split_dir = root / split
    if not split_dir.is_dir():
        raise DatasetError(
            f"dataset split {split_dir} not found; expected an ImageFolder tree "
            f"{root}/{{train,val}}/<class>/*.jpg — create one with "
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
