"""The first convolution of torchvision's ImageNet models, rebuilt for other inputs."""

from __future__ import annotations

from torch import nn


def stem_conv(in_channels: int, out_channels: int, small_input: bool) -> nn.Conv2d | None:
    """The conv to put in place of the model's first one, or None to keep torchvision's.

    Args:
        small_input: a 3×3 stride-1 conv, the usual CIFAR adaptation (the caller also drops the
            stem's max pool); otherwise torchvision's 7×7 stride-2 conv for `in_channels`, needed
            only when that is not 3.
    """
    if small_input:
        return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    if in_channels != 3:
        return nn.Conv2d(in_channels, out_channels, kernel_size=7, stride=2, padding=3, bias=False)
    return None
