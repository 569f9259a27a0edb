"""Sample formats: how a dataset on shared storage is listed and decoded, and synthetic datasets of each.

`FORMATS` maps the names that `conf/dataset/*.yaml` (`format:`), `hpcshuffle stage --format`
and `hpcshuffle synth` use to the formats; adding one means a module and an entry here.
"""

from __future__ import annotations

from hpcshuffle.formats import (
    cifar,
    deepcam,
    digits,
    dlio_npz,
    fashion_mnist,
    imagefolder,
    memory,
    packed_h5,
    webdataset,
)
from hpcshuffle.formats.codec import DatasetFormat

FORMATS: dict[str, DatasetFormat] = {
    "imagefolder": imagefolder.FORMAT,
    "cifar100": cifar.FORMAT,
    "deepcam": deepcam.FORMAT,
    "memory": memory.FORMAT,
    "webdataset": webdataset.FORMAT,
    "packed_h5": packed_h5.FORMAT,
    "digits": digits.FORMAT,
    "fashion_mnist": fashion_mnist.FORMAT,
    "dlio_npz": dlio_npz.FORMAT,
}


def get_format(name: str) -> DatasetFormat:
    """The format named `name` in `FORMATS`; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown dataset format {name!r}; choose one of {sorted(FORMATS)}") from None
