"""`dataset=synthetic-in-memory`: samples that cost nothing to read, to measure the runner itself.

The dataset on disk is one small JSON file (`memory.json`: sample counts, classes, image size);
every sample is zero bytes and decodes to the same random image, so a run's `io` time is the
loader's own overhead and the throughput benchmark compares the training loop with a bare one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcshuffle.errors import at_least
from hpcshuffle.formats.catalog import Catalog, DatasetError, SourceFile
from hpcshuffle.formats.codec import DatasetFormat, DatasetOptions

if TYPE_CHECKING:
    import torch

SPEC = "memory.json"
SPLITS = ("train", "val")


@dataclass(frozen=True)
class MemoryCatalog(Catalog):
    """Zero-byte samples: nothing to stat, stage or read."""

    def stat(self, sample_id: int) -> SourceFile:
        return SourceFile(0, 0)

    def read_chunks(self, sample_id: int) -> Iterator[bytes]:
        return iter(())


def read_spec(root: Path) -> dict:
    """The dataset's `memory.json`; DatasetError if it is missing or not JSON."""
    try:
        return json.loads((Path(root) / SPEC).read_text())
    except (OSError, ValueError) as err:
        raise DatasetError(f"{Path(root) / SPEC} is not an in-memory dataset spec ({err}); "
                           "use dataset=synthetic-in-memory, which writes it on first use") from None


def scan(root: str | Path, split: str) -> MemoryCatalog:
    """List a split of zero-byte samples, labels cycling through the classes."""
    spec = read_spec(Path(root))
    count = spec["samples"] if split == "train" else spec["val_samples"]
    classes = tuple(f"class_{label:04d}" for label in range(spec["classes"]))
    relpaths = tuple(f"{split}/{sample_id:09d}.mem" for sample_id in range(count))
    labels = tuple(sample_id % spec["classes"] for sample_id in range(count))
    return MemoryCatalog(Path(root), classes, relpaths, labels)


class MemoryCodec:
    """Decodes every sample to one random (3, size, size) image drawn from the spec's seed, and its label."""

    task = "classify"
    in_channels = 3

    def __init__(self, root: Path, train_catalog: Catalog, options: DatasetOptions) -> None:
        import torch  # only where samples are decoded (see codec.py)

        spec = read_spec(root)
        self.num_classes = spec["classes"]
        generator = torch.Generator().manual_seed(spec["seed"])
        self.image = torch.randn(3, spec["size"], spec["size"], generator=generator)

    def decode(self, data: bytes, label: int, train: bool) -> tuple[torch.Tensor, int]:
        """(the one image, label), whatever `data` holds."""
        return self.image, label


def synthesize(out: str | Path, *, seed: int, progress: bool, samples: int, classes: int = 1000,
               size: int = 224, val_samples: int | None = None) -> Path:
    """Write the spec (`memory.json`) of an in-memory dataset into `out`; returns `out`. ValueError
    for samples or classes < 1 or size < 8."""
    at_least("samples", samples)
    at_least("classes", classes)
    at_least("size", size, 8)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = {"samples": samples, "val_samples": val_samples if val_samples is not None else max(1, samples // 10),
            "classes": classes, "size": size, "seed": seed}
    (out / SPEC).write_text(json.dumps(spec))
    return out


FORMAT = DatasetFormat(splits=SPLITS, scan=scan, codec=MemoryCodec, synthesize=synthesize)
