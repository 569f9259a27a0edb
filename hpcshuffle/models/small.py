"""Small CNNs for CPU runs and tests: a few seconds per epoch on thousands of 32×32 images."""

from __future__ import annotations

from torch import nn

from hpcshuffle.models.options import positive_int


def _block(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


def small_cnn(num_classes: int, in_channels: int = 3, width: int = 16) -> nn.Module:
    """Three conv-BN-ReLU blocks (two with 2× pooling), global average pooling, a linear head.

    Args:
        num_classes: Width of the output logits.
        in_channels: Channels of the input images.
        width: Channels of the first block; the next two have 2× and 4× as many.

    Returns:
        A module mapping (N, in_channels, H, W) float images to (N, num_classes) logits.
    """
    width = positive_int("width", width)
    return nn.Sequential(
        _block(in_channels, width),
        nn.MaxPool2d(2),
        _block(width, 2 * width),
        nn.MaxPool2d(2),
        _block(2 * width, 4 * width),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, num_classes),
    )
