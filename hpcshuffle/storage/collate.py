"""How a batch's items become the tensors the training loop gets: the readable ones stacked, the
skipped ones counted, and, with loader.decode=gpu, the ones left encoded carried beside them
(`EncodedBatch`) for the training process to decode on its device (device_decode.py)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.data import default_collate

from hpcshuffle.formats.jpeg_batch import CROP_FIELDS, RawImage


class EncodedBatch(NamedTuple):
    """A batch's inputs when some samples stayed encoded (`RawImage`): the decoded ones stacked, the
    encoded ones' bytes back to back, and where each sits in the batch (positions into its labels
    and ids). device_decode.py turns it into one input tensor on the training device.

    Attributes:
        decoded: (D, C, H, W) float32, or None when every sample stayed encoded.
        decoded_at: (D,) int64 positions of `decoded` in the batch.
        data: (total bytes,) uint8, the encoded samples' JPEGs concatenated.
        ends: (E,) int64, where each JPEG ends in `data`.
        crops: (E, 5) int64, each one's `Crop` (jpeg_batch.CROP_FIELDS).
        encoded_at: (E,) int64 positions of the encoded samples in the batch.
    """

    decoded: torch.Tensor | None
    decoded_at: torch.Tensor
    data: torch.Tensor
    ends: torch.Tensor
    crops: torch.Tensor
    encoded_at: torch.Tensor

    def jpegs(self) -> list[torch.Tensor]:
        """Each encoded sample's bytes, a view into `data`."""
        starts = [0, *self.ends[:-1].tolist()]
        return [self.data[start:end] for start, end in zip(starts, self.ends.tolist())]


def collate_skipping(items: list) -> tuple[torch.Tensor | EncodedBatch | None, torch.Tensor, torch.Tensor, int]:
    """Batch the readable items; (images, labels, ids, how many were skipped). Images None if all were;
    an `EncodedBatch` if some stayed encoded."""
    kept = [item for item in items if item is not None]
    skipped = len(items) - len(kept)
    if not kept:
        return None, torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), skipped
    encoded_at = [i for i, item in enumerate(kept) if isinstance(item[0], RawImage)]
    if not encoded_at:
        images, labels, sample_ids = default_collate(kept)
        return images, labels, sample_ids, skipped
    decoded_at = [i for i, item in enumerate(kept) if not isinstance(item[0], RawImage)]
    raw = [kept[i][0] for i in encoded_at]
    images = EncodedBatch(
        decoded=torch.stack([kept[i][0] for i in decoded_at]) if decoded_at else None,
        decoded_at=torch.tensor(decoded_at, dtype=torch.long),
        data=torch.cat([image.data for image in raw]),
        ends=torch.tensor([len(image.data) for image in raw], dtype=torch.long).cumsum(0),
        crops=torch.tensor([image.crop for image in raw], dtype=torch.long).view(-1, CROP_FIELDS),
        encoded_at=torch.tensor(encoded_at, dtype=torch.long),
    )
    labels = default_collate([item[1] for item in kept])
    sample_ids = torch.tensor([item[2] for item in kept], dtype=torch.long)
    return images, labels, sample_ids, skipped
