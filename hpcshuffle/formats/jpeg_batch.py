"""JPEG batches decoded where the model trains (`loader.decode=gpu`): nvjpeg on a GPU, libjpeg on the CPU.

Loader workers only read a sample's bytes and draw its augmentation (a `Crop`, from the same
seeded draws as the CPU path, formats/imagefolder.py); the training process then decodes the
whole batch with torchvision's batched `decode_jpeg` on its device and crops, resizes, flips and
normalises it as batched tensor operations. Resizing is `roi_align` over each crop box with an
adaptive number of samples per output pixel, so a downscale averages what it covers, as an
antialiased resize does; no-op boxes (the whole image at its own size) are only stacked.

Module-level imports stay light: torch and torchvision load with the first batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

# torchvision 0.29 warns on every image call that decoding moves to TorchCodec; the lent GPUs'
# image has torchvision 0.26 and no TorchCodec, so this module stays on torchvision.io for now
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision are deprecated")

# (top, left, height, width, flip) per sample, the columns of a batch's crop table
CROP_FIELDS = 5


class Crop(NamedTuple):
    """One sample's augmentation: the box (in the stored image's pixels) to resize to the model's
    side, and whether to flip it horizontally afterwards."""

    top: int
    left: int
    height: int
    width: int
    flip: bool


class RawImage(NamedTuple):
    """A training sample left encoded by a loader worker: its JPEG bytes (1-D uint8) and its crop."""

    data: torch.Tensor
    crop: Crop


def full_image(height: int, width: int, flip: bool = False) -> Crop:
    """The box of a whole `height` × `width` image."""
    return Crop(0, 0, height, width, flip)


def decode_jpegs(raw: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """(3, H, W) uint8 RGB images of JPEG byte tensors (1-D uint8, on the CPU), decoded on `device`
    in one batched call; RuntimeError if any is not a decodable JPEG."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(list(raw), mode=ImageReadMode.RGB, device=device)


def jpeg_failure(err: RuntimeError) -> str:
    """What `decode_jpeg`'s error says, without the C++ source location it starts with."""
    line = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
    return line.split(".cpp:", 1)[1].split(", ", 1)[-1] if ".cpp:" in line else line


def crop_batch(images: Sequence[torch.Tensor], crops: torch.Tensor, size: tuple[int, int] | None,
               mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """The model's inputs from decoded images.

    Args:
        images: (3, H_i, W_i) uint8 images on one device (sizes may differ).
        crops: (N, 5) int64, one `Crop` per image (on the CPU).
        size: (height, width) of the output; None keeps the images' own size, which must then be
            one size with whole-image boxes.
        mean, std: per-channel normalisation, in [0, 1] units.

    Returns:
        (N, 3, size) float32 on the images' device, normalised.
    """
    import torch
    from torchvision.ops import roi_align

    if len(images) != len(crops):
        raise ValueError(f"{len(images)} images for {len(crops)} crops")
    device = images[0].device
    out_size = size or tuple(images[0].shape[-2:])
    out = torch.empty(len(images), 3, *out_size, dtype=torch.float32, device=device)
    # images of one size go through one call: ImageNet's vary, synthetic sets have one size
    by_shape: dict[tuple[int, int], list[int]] = {}
    for index, image in enumerate(images):
        by_shape.setdefault(tuple(image.shape[-2:]), []).append(index)
    for (height, width), indices in by_shape.items():
        stack = torch.stack([images[i] for i in indices]).float()
        boxes = crops[indices, :4]
        whole = bool((boxes == torch.tensor([0, 0, height, width])).all())
        if whole and (height, width) == tuple(out_size):
            out[indices] = stack
            continue
        if size is None:
            raise ValueError(f"images of {height}x{width} and {out_size[0]}x{out_size[1]} in one batch: set "
                             "dataset.image_size so they are resized to one side")
        top, left, box_height, box_width = boxes.double().unbind(1)
        rois = torch.stack([torch.arange(len(indices), dtype=torch.float64), left, top, left + box_width,
                            top + box_height], dim=1)
        out[indices] = roi_align(stack, rois.to(device=device, dtype=torch.float32), out_size,
                                 spatial_scale=1.0, sampling_ratio=0, aligned=True)
    flips = crops[:, 4].bool().to(device)
    out[flips] = out[flips].flip(-1)  # only the flipped rows are copied
    # in the CPU path's order of operations (ToDtype's scale, then Normalize), to its last bit
    out = out.mul_(1.0 / 255)
    return out.sub_(torch.tensor(mean, device=device).view(1, 3, 1, 1)).div_(torch.tensor(std, device=device).view(1, 3, 1, 1))
