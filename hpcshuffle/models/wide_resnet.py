"""Wide residual networks (Zagoruyko & Komodakis 2016), the CIFAR variant: WRN-depth-width.

Three groups of pre-activation basic blocks with 16·width, 32·width and 64·width channels at 32×32,
16×16 and 8×8 for a 32×32 input; (depth − 4) / 6 blocks per group. The global pool is adaptive, so
other input sizes work too.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hpcshuffle.models.options import positive_int, probability

STEM_CHANNELS = 16
GROUP_CHANNELS = (16, 32, 64)  # times the widen factor
GROUP_STRIDES = (1, 2, 2)


class PreActBlock(nn.Module):
    """BN-ReLU-conv3×3-dropout-BN-ReLU-conv3×3 plus a shortcut (a 1×1 conv when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.shortcut = None
        if in_channels != out_channels or stride != 1:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: the two pre-activated convs plus the shortcut (the projection of the
        pre-activated input where the shape changes, else `x`)."""
        activated = F.relu(self.bn1(x))
        # the projection reads the pre-activated input, as in the authors' code; identity reads x
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        out = self.conv1(activated)
        out = self.conv2(self.dropout(F.relu(self.bn2(out))))
        return out + shortcut


def wide_resnet(
    num_classes: int, in_channels: int = 3, depth: int = 28, width: int = 10, dropout: float = 0.3
) -> nn.Module:
    """WRN-`depth`-`width` with dropout between the two convs of every block.

    Args:
        num_classes: Width of the output logits.
        in_channels: Channels of the input images.
        depth: 6·n + 4 for n blocks per group (16, 22, 28, 40, ...), as the paper counts layers.
        width: Widen factor k: the groups have 16k, 32k and 64k channels.
        dropout: Drop probability inside each block (the paper uses 0.3 on CIFAR).

    Returns:
        A module mapping (N, in_channels, H, W) float images to (N, num_classes) logits.
    """
    depth = positive_int("depth", depth, minimum=10)
    if (depth - 4) % 6:
        raise ValueError(f"depth must be 6·n + 4 (10, 16, 22, 28, 40, ...), got {depth}")
    width = positive_int("width", width)
    dropout = probability("dropout", dropout)
    blocks_per_group = (depth - 4) // 6

    layers: list[nn.Module] = [nn.Conv2d(in_channels, STEM_CHANNELS, 3, padding=1, bias=False)]
    channels = STEM_CHANNELS
    for group_channels, stride in zip(GROUP_CHANNELS, GROUP_STRIDES):
        for index in range(blocks_per_group):
            out_channels = group_channels * width
            layers.append(PreActBlock(channels, out_channels, stride if index == 0 else 1, dropout))
            channels = out_channels
    layers += [
        nn.BatchNorm2d(channels),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, num_classes),
    ]
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return model


def wrn28_10(
    num_classes: int, in_channels: int = 3, depth: int = 28, width: int = 10, dropout: float = 0.3
) -> nn.Module:
    """WRN-28-10, the paper's CIFAR model (36.5 M parameters for 100 classes); see `wide_resnet`."""
    return wide_resnet(num_classes, in_channels, depth=depth, width=width, dropout=dropout)


def wrn16_2(
    num_classes: int, in_channels: int = 3, depth: int = 16, width: int = 2, dropout: float = 0.3
) -> nn.Module:
    """WRN-16-2, a 0.7 M-parameter variant for CPU runs and tests; see `wide_resnet`."""
    return wide_resnet(num_classes, in_channels, depth=depth, width=width, dropout=dropout)
