"""DeepCAM climate data, one HDF5 file per sample: ``<root>/{train,validation}/*.h5``.

Each file holds ``climate/data`` (H, W, 16) float32 and ``climate/labels_0`` (H, W); staging and
the exchange move the files whole, so this module only lists them.
"""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.formats.catalog import Catalog, DatasetError


def scan(root: str | Path, split: str) -> Catalog:
    """List `root/split/*.h5` in name order; labels are inside the files, so all are 0."""
    root = Path(root)
    split_dir = root / split
    if not split_dir.is_dir():
        raise DatasetError(f"DeepCAM split {split_dir} not found; expected {root}/{{train,validation}}/*.h5")
    relpaths = tuple(f"{split}/{path.name}" for path in sorted(split_dir.glob("*.h5")))
    if not relpaths:
        raise DatasetError(f"{split_dir} holds no .h5 files")
    return Catalog(root, (), relpaths, (0,) * len(relpaths))
