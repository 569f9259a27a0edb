"""An emulated accelerator, as DLIO emulates one: a step's compute is a fixed wait, not arithmetic.

`model=emulated model.step_s=0.636` makes every forward pass sleep `step_s` seconds (DLIO's
`computation_time` per step; 0.636 s is its unet3d_a100 workload's), then average the input to one
value per channel and apply a linear head, so the step still has a gradient, an allreduce and an
optimizer step. What a run then measures is the loader: whether storage keeps an accelerator of that
speed busy (the AU of `hpcshuffle report`). One forward pass per step: with virtual workers split
into chunks (`shuffle.virtual_chunk`), each chunk sleeps.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from hpcshuffle.models.options import positive_float


class Emulated(nn.Module):
    """Sleeps `step_s` per forward pass, then maps (N, C, H, W) to (N, num_classes) by a channel mean and a linear head."""

    def __init__(self, num_classes: int, in_channels: int, step_s: float) -> None:
        super().__init__()
        self.step_s = step_s
        self.head = nn.Linear(in_channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(N, num_classes) logits of (N, C, H, W) `images`, `step_s` seconds after the call."""
        time.sleep(self.step_s)
        return self.head(images.mean(dim=tuple(range(2, images.dim()))))


def emulated(num_classes: int, in_channels: int = 3, step_s: float = 0.1) -> nn.Module:
    """The emulated accelerator.

    Args:
        num_classes: Width of the output logits.
        in_channels: Channels of the input (the dataset gives them: 1 for DLIO's npz samples).
        step_s: Seconds each forward pass waits (DLIO's `computation_time`).
    """
    return Emulated(num_classes, in_channels, positive_float("step_s", step_s))
