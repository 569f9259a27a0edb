"""What every dataset format provides: a listing of its splits, a codec, a synthesizer.

A *catalog* (catalog.py) numbers the samples of a split and says where their bytes are; the
engine stages, stores and exchanges those bytes untouched. A *codec* turns one sample's bytes
into the model's input and target, augmenting training samples. Augmentation draws from
torch's global RNG, which the loader seeds per (run seed, epoch, sample id), so codecs need no
seeds of their own.

Format modules import torch and torchvision only when a codec is built: `hpcshuffle stage`
lists datasets through this package on every rank and has no use for torch's seconds of import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hpcshuffle.errors import at_least
from hpcshuffle.formats.catalog import Catalog

if TYPE_CHECKING:
    import torch

AUGMENT = ("standard", "flip", "none")


class SampleError(ValueError):
    """A sample's bytes cannot be decoded (truncated file, wrong shape, missing dataset)."""


@dataclass(frozen=True)
class DatasetOptions:
    """Per-run choices a codec honours.

    Attributes:
        augment: "standard" (the format's usual training augmentation), "flip" (horizontal
            flips only) or "none".
        image_size: the side models see, for formats whose images vary in size (ImageFolder:
            the training crop and the validation centre crop); None keeps the stored size.
    """

    augment: str = "standard"
    image_size: int | None = None

    def __post_init__(self) -> None:
        if self.augment not in AUGMENT:
            raise ValueError(f"dataset.augment must be one of {AUGMENT}, got {self.augment!r}")
        if self.image_size is not None:
            at_least("dataset.image_size", self.image_size, 8, "or null")


class Codec(Protocol):
    """Decodes one sample; `task` is "classify" (target: int) or "segment" (target: (H, W) int64)."""

    task: str
    in_channels: int
    num_classes: int

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int | torch.Tensor]:
        """(input (C, H, W) float32, target); raises SampleError on bytes it cannot decode."""
        ...


@dataclass(frozen=True)
class DatasetFormat:
    """One on-disk layout, as `conf/dataset/*.yaml` (`format:`) and `hpcshuffle synth` name it.

    Attributes:
        splits: the names of the training and validation splits under the root.
        scan: `scan(root, split)` lists a split (DatasetError if it is not there).
        codec: `codec(root, train_catalog, options)` builds the decoder for this dataset.
        synthesize: `synthesize(out, *, seed, progress, **spec)` writes a learnable synthetic
            dataset in this layout and returns its root; `spec` is `dataset.synthesize`.
        class_labels: whether `Catalog.labels` are the samples' classes (False where the labels
            live inside the files, as DeepCAM's per-pixel masks: the listing's labels are all 0).
    """

    splits: tuple[str, str]
    scan: Callable[[Path, str], Catalog]
    codec: Callable[[Path, Catalog, DatasetOptions], Codec]
    synthesize: Callable[..., Path]
    class_labels: bool = True
