"""ImageFolder datasets (ImageNet layout): ``<root>/{train,val}/<class>/<image>.{jpg,jpeg,png}``.

Sample ids are positions in the sorted list of training files, so every rank that scans the
same tree numbers it the same way; `Catalog.fingerprint` lets ranks check that they did.
"""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.formats.catalog import Catalog, DatasetError

__all__ = ["IMAGE_SUFFIXES", "Catalog", "DatasetError", "scan"]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


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
