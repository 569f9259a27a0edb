"""ResNet-50 (He et al. 2016) from torchvision, untrained, with a stem for other channels and small images."""

from __future__ import annotations

import torchvision
from torch import nn

from hpcshuffle.models.options import boolean
from hpcshuffle.models.stem import stem_conv

STEM_CHANNELS = 64


def resnet50(num_classes: int, in_channels: int = 3, small_input: bool = False) -> nn.Module:
    """ResNet-50 for `in_channels`-channel images and `num_classes` classes; weights are random.

    Args:
        num_classes: Width of the output logits.
        in_channels: Channels of the input images; the first conv is rebuilt when it is not 3.
        small_input: Replace the ImageNet stem (7×7 stride-2 conv + 3×3 stride-2 max pool, a 4×
            reduction) by a 3×3 stride-1 conv without pooling, the usual CIFAR adaptation: 32×32
            images then reach the last stage as 4×4 instead of 1×1.

    Returns:
        A module mapping (N, in_channels, H, W) float images to (N, num_classes) logits.
    """
    small_input = boolean("small_input", small_input)
    model = torchvision.models.resnet50(weights=None, num_classes=num_classes)
    replacement = stem_conv(in_channels, STEM_CHANNELS, small_input)
    if replacement is not None:
        model.conv1 = replacement
    if small_input:
        model.maxpool = nn.Identity()
    # the replacement starts from the same initialisation torchvision gives every ResNet conv
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model
