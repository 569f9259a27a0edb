"""Inception-v4 (Szegedy et al. 2016, Figures 3–9): stem, 4× A, reduction A, 7× B, reduction B, 3× C.

Every conv is conv-BN-ReLU. Channel counts follow the paper (reduction A with k=192, l=224, m=256,
n=384) times a `width` multiplier; each block records its `out_channels` so the next one is built
to match whatever the multiplier rounds to. The paper's stem takes 299×299 images to 35×35 with
unpadded ("V") convs; `small_input` pads them and drops their strides so CIFAR's 32×32 images enter
the Inception-A blocks as 32×32, about the grid the paper designed them for.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from hpcshuffle.models.options import (
    Scale,
    boolean,
    positive_float,
    positive_int,
    probability,
    scaled,
)

# smallest side each stem survives: 75 -> 37 -> 35 -> 35 -> 17 -> 15 -> 7 (stem), 3 (reduction A), 1 (reduction B)
MIN_INPUT_SIZE = {False: 75, True: 7}


def conv_bn(in_channels: int, out_channels: int, kernel: int | tuple[int, int], stride: int = 1,
            padding: int | tuple[int, int] = 0) -> nn.Sequential:
    """Conv (no bias: BN adds one) - BatchNorm - ReLU."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


def conv_1x7_7x1(in_channels: int, mid_channels: int, out_channels: int) -> list[nn.Module]:
    """A 7×7 receptive field as a 1×7 then a 7×1 conv, both padded to keep the size."""
    return [conv_bn(in_channels, mid_channels, (1, 7), padding=(0, 3)),
            conv_bn(mid_channels, out_channels, (7, 1), padding=(3, 0))]


class Branches(nn.Module):
    """Runs parallel branches on one input and concatenates their outputs along channels."""

    def __init__(self, branches: list[nn.Module], out_channels: int) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The branches' outputs of `x`, concatenated along channels."""
        return torch.cat([branch(x) for branch in self.branches], dim=1)


class SplitTail(nn.Module):
    """Inception-C's fork: one input feeds a 1×3 and a 3×1 conv whose outputs are concatenated."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.wide = conv_bn(in_channels, out_channels, (1, 3), padding=(0, 1))
        self.tall = conv_bn(in_channels, out_channels, (3, 1), padding=(1, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The 1×3 and 3×1 convs of `x`, concatenated along channels."""
        return torch.cat([self.wide(x), self.tall(x)], dim=1)


def stem(in_channels: int, ch: Scale, small_input: bool) -> nn.Sequential:
    """Figure 3: three convs, then three pool/conv forks (160, 192 and 384 channels at width 1)."""
    stride, pad = (1, 1) if small_input else (2, 0)
    convs = nn.Sequential(
        conv_bn(in_channels, ch(32), 3, stride=stride, padding=pad),
        conv_bn(ch(32), ch(32), 3, padding=pad),
        conv_bn(ch(32), ch(64), 3, padding=1),
    )
    fork1 = Branches([nn.MaxPool2d(3, stride, padding=pad), conv_bn(ch(64), ch(96), 3, stride=stride, padding=pad)],
                     ch(64) + ch(96))
    fork2 = Branches([
        nn.Sequential(conv_bn(fork1.out_channels, ch(64), 1), conv_bn(ch(64), ch(96), 3, padding=pad)),
        nn.Sequential(conv_bn(fork1.out_channels, ch(64), 1), *conv_1x7_7x1(ch(64), ch(64), ch(64)),
                      conv_bn(ch(64), ch(96), 3, padding=pad)),
    ], 2 * ch(96))
    fork3 = Branches([conv_bn(fork2.out_channels, ch(192), 3, stride=stride, padding=pad),
                      nn.MaxPool2d(3, stride, padding=pad)], ch(192) + fork2.out_channels)
    return nn.Sequential(convs, fork1, fork2, fork3)


def avg_pool_branch(in_channels: int, out_channels: int) -> nn.Sequential:
    """3×3 average pool (padding not counted) then a 1×1 conv: the pooling branch of blocks A, B, C."""
    return nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
                         conv_bn(in_channels, out_channels, 1))


def inception_a(in_channels: int, ch: Scale) -> Branches:
    """Figure 4 (35×35 grid): four 96-channel branches."""
    return Branches([
        avg_pool_branch(in_channels, ch(96)),
        conv_bn(in_channels, ch(96), 1),
        nn.Sequential(conv_bn(in_channels, ch(64), 1), conv_bn(ch(64), ch(96), 3, padding=1)),
        nn.Sequential(conv_bn(in_channels, ch(64), 1), conv_bn(ch(64), ch(96), 3, padding=1),
                      conv_bn(ch(96), ch(96), 3, padding=1)),
    ], 4 * ch(96))


def reduction_a(in_channels: int, ch: Scale) -> Branches:
    """Figure 7 with k=192, l=224, m=256, n=384: 35×35 -> 17×17."""
    return Branches([
        nn.MaxPool2d(3, stride=2),
        conv_bn(in_channels, ch(384), 3, stride=2),
        nn.Sequential(conv_bn(in_channels, ch(192), 1), conv_bn(ch(192), ch(224), 3, padding=1),
                      conv_bn(ch(224), ch(256), 3, stride=2)),
    ], in_channels + ch(384) + ch(256))


def inception_b(in_channels: int, ch: Scale) -> Branches:
    """Figure 5 (17×17 grid): 7×7 receptive fields factorised into 1×7 and 7×1 convs."""
    return Branches([
        avg_pool_branch(in_channels, ch(128)),
        conv_bn(in_channels, ch(384), 1),
        nn.Sequential(conv_bn(in_channels, ch(192), 1), *conv_1x7_7x1(ch(192), ch(224), ch(256))),
        nn.Sequential(conv_bn(in_channels, ch(192), 1), *conv_1x7_7x1(ch(192), ch(192), ch(224)),
                      *conv_1x7_7x1(ch(224), ch(224), ch(256))),
    ], ch(128) + ch(384) + 2 * ch(256))


def reduction_b(in_channels: int, ch: Scale) -> Branches:
    """Figure 8: 17×17 -> 8×8."""
    return Branches([
        nn.MaxPool2d(3, stride=2),
        nn.Sequential(conv_bn(in_channels, ch(192), 1), conv_bn(ch(192), ch(192), 3, stride=2)),
        nn.Sequential(conv_bn(in_channels, ch(256), 1), *conv_1x7_7x1(ch(256), ch(256), ch(320)),
                      conv_bn(ch(320), ch(320), 3, stride=2)),
    ], in_channels + ch(192) + ch(320))


def inception_c(in_channels: int, ch: Scale) -> Branches:
    """Figure 6 (8×8 grid): six 256-channel outputs, four of them from 1×3/3×1 forks."""
    return Branches([
        avg_pool_branch(in_channels, ch(256)),
        conv_bn(in_channels, ch(256), 1),
        nn.Sequential(conv_bn(in_channels, ch(384), 1), SplitTail(ch(384), ch(256))),
        nn.Sequential(conv_bn(in_channels, ch(384), 1), conv_bn(ch(384), ch(448), (1, 3), padding=(0, 1)),
                      conv_bn(ch(448), ch(512), (3, 1), padding=(1, 0)), SplitTail(ch(512), ch(256))),
    ], 6 * ch(256))


class InceptionV4(nn.Module):
    """Stem, the A/B/C block stacks with their reductions, global average pool, dropout, linear."""

    def __init__(self, num_classes: int, in_channels: int, width: float, small_input: bool, dropout: float,
                 blocks_a: int, blocks_b: int, blocks_c: int) -> None:
        super().__init__()
        ch = partial(scaled, width=width)
        self.small_input = small_input
        self.stem = stem(in_channels, ch, small_input)
        channels = self.stem[-1].out_channels
        blocks: list[Branches] = []
        for make_block, repeats in ((inception_a, blocks_a), (reduction_a, 1), (inception_b, blocks_b),
                                    (reduction_b, 1), (inception_c, blocks_c)):
            for _ in range(repeats):
                blocks.append(make_block(channels, ch))
                channels = blocks[-1].out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout),
                                  nn.Linear(channels, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N, num_classes) of `images` (N, C, H, W); ValueError for images smaller than the stem
        takes (MIN_INPUT_SIZE)."""
        min_size = MIN_INPUT_SIZE[self.small_input]
        if min(images.shape[-2:]) < min_size:
            fix = "" if self.small_input else "; build with small_input=true for CIFAR-sized images"
            raise ValueError(
                f"Inception-v4 needs images of at least {min_size}×{min_size}, got {tuple(images.shape[-2:])}{fix}"
            )
        return self.head(self.blocks(self.stem(images)))


def inceptionv4(num_classes: int, in_channels: int = 3, small_input: bool = False, width: float = 1.0,
                dropout: float = 0.2, blocks_a: int = 4, blocks_b: int = 7, blocks_c: int = 3) -> nn.Module:
    """Inception-v4 as in the paper (42.7 M parameters for 1000 classes), optionally narrower or shorter.

    Args:
        num_classes: Width of the output logits.
        in_channels: Channels of the input images.
        small_input: Pad the stem convs and drop their strides so 32×32 images keep their size
            into the Inception-A blocks (needs >= 7×7 instead of >= 75×75).
        width: Multiplier on every channel count (0.25 gives a model for CPU tests).
        dropout: Drop probability before the classifier (the paper keeps 0.8 of the units).
        blocks_a: Inception-A blocks (paper: 4).
        blocks_b: Inception-B blocks (paper: 7).
        blocks_c: Inception-C blocks (paper: 3).

    Returns:
        A module mapping (N, in_channels, H, W) float images to (N, num_classes) logits; smaller
        images than the stem allows raise ValueError naming the minimum.
    """
    return InceptionV4(
        num_classes, in_channels,
        width=positive_float("width", width),
        small_input=boolean("small_input", small_input),
        dropout=probability("dropout", dropout),
        blocks_a=positive_int("blocks_a", blocks_a),
        blocks_b=positive_int("blocks_b", blocks_b),
        blocks_c=positive_int("blocks_c", blocks_c),
    )


def inceptionv4_small(num_classes: int, in_channels: int = 3, small_input: bool = True, width: float = 0.25,
                      dropout: float = 0.2, blocks_a: int = 1, blocks_b: int = 1, blocks_c: int = 1) -> nn.Module:
    """A quarter-width Inception-v4 with one block per stage and the 32×32 stem, for CPU runs and tests."""
    return inceptionv4(num_classes, in_channels, small_input=small_input, width=width, dropout=dropout,
                       blocks_a=blocks_a, blocks_b=blocks_b, blocks_c=blocks_c)
