"""DeepCAM's segmentation network: DeepLabv3+ on a modified aligned Xception, as in the MLPerf HPC reference.

Per pixel of a (16-channel) climate snapshot it predicts background, tropical cyclone or atmospheric
river. Shapes for an H×W input (output stride 16):

    entry flow  H/2 (two convs) -> H/4 (block 1: low-level features) -> H/8 -> H/16
    middle flow 16 residual blocks of three separable convs at H/16
    exit flow   one block, then three separable convs with dilation 2 at H/16 (2048 channels)
    ASPP        1×1 and 3×3 convs with dilation 6, 12, 18, plus image pooling -> 256 channels
    decoder     two stride-2 transposed convs to H/4, fuse with the 48-channel low-level
                features, two more to H: (N, classes, H, W) logits

The reference hard-codes the ASPP image-pooling size for 768×1152 inputs; here the pooled vector is
broadcast to whatever size the features have, so any H and W divisible by 16 work (each transposed
conv exactly doubles the size, so the decoder lands on the low-level features and the input size).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from hpcshuffle.models.options import Scale, positive_float, positive_int, scaled

OUTPUT_STRIDE = 16  # input pixels per feature pixel at the ASPP
ASPP_RATES = (1, 6, 12, 18)  # dilation of the four ASPP convs at output stride 16 (rate 1 is a 1×1 conv)
EXIT_DILATION = 2  # the exit flow dilates instead of striding a fifth time


def conv_bn_relu(in_channels: int, out_channels: int, kernel: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    """Conv (no bias: BN adds one), padded to keep the size at stride 1, then BatchNorm and ReLU."""
    padding = dilation * (kernel - 1) // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, dilation=dilation, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


def separable_conv(in_channels: int, out_channels: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    """Depthwise 3×3 then pointwise 1×1, no BN between them (as in the reference)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, in_channels, 3, stride=stride, padding=dilation, dilation=dilation,
                  groups=in_channels, bias=False),
        nn.Conv2d(in_channels, out_channels, 1, bias=False),
    )


def transposed_conv(in_channels: int, out_channels: int) -> nn.ConvTranspose2d:
    """3×3 stride-2 transposed conv that exactly doubles height and width."""
    return nn.ConvTranspose2d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1, bias=False)


class XceptionBlock(nn.Module):
    """`reps` separable convs with BN (ReLU between them) plus a skip path, summed, then an optional ReLU.

    Args:
        in_channels: Channels in.
        out_channels: Channels out.
        reps: Separable convs in the residual path before the tail conv.
        stride: 2 adds a strided separable conv at the end of the residual path and strides the skip.
        dilation: Dilation of the `reps` separable convs.
        grow_first: Change the channel count in the first separable conv (else in the last).
        tail_conv: Add a stride-1 separable conv at the end of the residual path (the reference's
            `is_last` blocks: the exit block).
        end_with_relu: Apply ReLU after the sum.
    """

    def __init__(self, in_channels: int, out_channels: int, reps: int, stride: int = 1, dilation: int = 1,
                 grow_first: bool = True, tail_conv: bool = False, end_with_relu: bool = True) -> None:
        super().__init__()
        widths = [out_channels] * reps if grow_first else [in_channels] * (reps - 1) + [out_channels]
        layers: list[nn.Module] = []
        channels = in_channels
        for width in widths:
            layers += [separable_conv(channels, width, dilation=dilation), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            channels = width
        layers.pop()  # the last ReLU, if any, comes after the sum with the skip path
        if stride != 1 or tail_conv:
            layers.append(separable_conv(out_channels, out_channels, stride=stride))
        self.residual = nn.Sequential(*layers)
        self.skip = None
        if in_channels != out_channels or stride != 1:
            self.skip = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(out_channels))
        self.end_with_relu = end_with_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual path plus the skip path (a strided 1×1 conv where the shape changes), then ReLU if asked."""
        out = self.residual(x) + (x if self.skip is None else self.skip(x))
        return F.relu(out, inplace=True) if self.end_with_relu else out


class Xception(nn.Module):
    """The modified aligned Xception backbone at output stride 16; returns (features, low-level features)."""

    def __init__(self, in_channels: int, ch: Scale, middle_blocks: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn_relu(in_channels, ch(32), 3, stride=2), conv_bn_relu(ch(32), ch(64), 3))
        # the reference's block 1 does not end with ReLU, but its in-place ReLU right after it also
        # rectifies the tensor kept as low-level features: both see the ReLU, as here
        self.block1 = XceptionBlock(ch(64), ch(128), reps=2, stride=2)
        self.entry = nn.Sequential(
            XceptionBlock(ch(128), ch(256), reps=2, stride=2),
            XceptionBlock(ch(256), ch(728), reps=2, stride=2),
        )
        self.middle = nn.Sequential(*(XceptionBlock(ch(728), ch(728), reps=3) for _ in range(middle_blocks)))
        self.exit = nn.Sequential(
            XceptionBlock(ch(728), ch(1024), reps=2, grow_first=False, tail_conv=True, end_with_relu=False),
            separable_conv(ch(1024), ch(1536), dilation=EXIT_DILATION), nn.BatchNorm2d(ch(1536)), nn.ReLU(inplace=True),
            separable_conv(ch(1536), ch(1536), dilation=EXIT_DILATION), nn.BatchNorm2d(ch(1536)), nn.ReLU(inplace=True),
            separable_conv(ch(1536), ch(2048), dilation=EXIT_DILATION), nn.BatchNorm2d(ch(2048)), nn.ReLU(inplace=True),
        )
        self.out_channels = ch(2048)
        self.low_level_channels = ch(128)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(features at output stride 16, low-level features at stride 4) of `x` (N, C, H, W)."""
        low_level = self.block1(self.stem(x))
        return self.exit(self.middle(self.entry(low_level))), low_level


class ImagePooling(nn.Module):
    """ASPP's fifth branch: global average, 1×1 conv, per-channel scale and shift, ReLU, broadcast back.

    No BatchNorm here, as in the reference: over a 1×1 map it would normalise over the batch alone.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))
        self.shift = nn.Parameter(torch.zeros(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled branch, broadcast back to `x`'s height and width (N, out_channels, H, W)."""
        pooled = F.relu(self.scale * self.conv(F.adaptive_avg_pool2d(x, 1)) + self.shift)
        # bilinear upsampling of a 1×1 map is a broadcast: expand costs no copy until the concat
        return pooled.expand(-1, -1, *x.shape[-2:])


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: parallel dilated convs and image pooling, fused by a 1×1 conv."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            conv_bn_relu(in_channels, out_channels, 1 if rate == 1 else 3, dilation=rate) for rate in ASPP_RATES
        )
        for branch in self.branches:
            nn.init.kaiming_normal_(branch[0].weight)
        self.pooling = ImagePooling(in_channels, out_channels)
        self.project = conv_bn_relu((len(ASPP_RATES) + 1) * out_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The five branches of `x`, concatenated and fused to (N, out_channels, H, W)."""
        return self.project(torch.cat([branch(x) for branch in self.branches] + [self.pooling(x)], dim=1))


class Decoder(nn.Module):
    """Upsample the ASPP output 4×, fuse it with the low-level features, upsample 4× more to logits."""

    def __init__(self, in_channels: int, low_level_channels: int, ch: Scale, num_classes: int) -> None:
        super().__init__()
        self.reduce_low_level = conv_bn_relu(low_level_channels, ch(48), 1)
        self.up_to_quarter = nn.Sequential(
            transposed_conv(in_channels, ch(256)), nn.BatchNorm2d(ch(256)), nn.ReLU(inplace=True),
            transposed_conv(ch(256), ch(256)), nn.BatchNorm2d(ch(256)), nn.ReLU(inplace=True),
        )
        self.fuse = nn.Sequential(
            conv_bn_relu(ch(256) + ch(48), ch(256), 3),
            conv_bn_relu(ch(256), ch(256), 3),
            nn.Conv2d(ch(256), ch(256), 1),
        )
        self.up_to_input = nn.Sequential(
            transposed_conv(ch(256), ch(256)), nn.BatchNorm2d(ch(256)), nn.ReLU(inplace=True),
            transposed_conv(ch(256), num_classes),  # logits: no BN, no ReLU
        )

    def forward(self, x: torch.Tensor, low_level: torch.Tensor) -> torch.Tensor:
        """Logits (N, num_classes, 16h, 16w) from ASPP's output `x` (N, C, h, w) and `low_level` at 4h × 4w."""
        x = torch.cat([self.up_to_quarter(x), self.reduce_low_level(low_level)], dim=1)
        return self.up_to_input(self.fuse(x))


def check_size(height: int, width: int) -> None:
    """Raise ValueError unless both sides are multiples of the output stride, naming the nearest ones."""
    if height % OUTPUT_STRIDE == 0 and width % OUTPUT_STRIDE == 0:
        return
    below = [side // OUTPUT_STRIDE * OUTPUT_STRIDE for side in (height, width)]
    above = [-(-side // OUTPUT_STRIDE) * OUTPUT_STRIDE for side in (height, width)]
    raise ValueError(
        f"DeepCAM needs height and width divisible by {OUTPUT_STRIDE} (its output stride), got {height}×{width}; "
        f"crop to {below[0]}×{below[1]} or pad to {above[0]}×{above[1]}"
    )


class DeepLabV3Plus(nn.Module):
    """Xception backbone, ASPP, decoder: (N, in_channels, H, W) -> (N, num_classes, H, W) logits."""

    def __init__(self, num_classes: int, in_channels: int, width: float, middle_blocks: int) -> None:
        super().__init__()
        ch = partial(scaled, width=width)
        self.backbone = Xception(in_channels, ch, middle_blocks)
        self.aspp = ASPP(self.backbone.out_channels, ch(256))
        self.decoder = Decoder(ch(256), self.backbone.low_level_channels, ch, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Per-pixel logits of `images`; ValueError unless H and W are multiples of 16 (`check_size`)."""
        check_size(*images.shape[-2:])
        features, low_level = self.backbone(images)
        return self.decoder(self.aspp(features), low_level)


def deepcam(num_classes: int = 3, in_channels: int = 16, width: float = 1.0, middle_blocks: int = 16) -> nn.Module:
    """The MLPerf HPC DeepCAM network (DeepLabv3+, modified Xception, output stride 16).

    Args:
        num_classes: Classes per pixel (DeepCAM: background, tropical cyclone, atmospheric river).
        in_channels: Input variables per pixel (DeepCAM: 16).
        width: Multiplier on every channel count (1.0: the reference; 0.125 runs on a CPU).
        middle_blocks: Residual blocks in the middle flow (reference: 16).

    Returns:
        A module mapping (N, in_channels, H, W) float tensors, H and W divisible by 16, to
        (N, num_classes, H, W) logits; other sizes raise ValueError naming the rule.
    """
    return DeepLabV3Plus(
        num_classes,
        in_channels,
        width=positive_float("width", width),
        middle_blocks=positive_int("middle_blocks", middle_blocks),
    )


def deepcam_small(
    num_classes: int = 3, in_channels: int = 16, width: float = 0.125, middle_blocks: int = 2
) -> nn.Module:
    """DeepCAM at 1/8 width with 2 middle blocks, for CPU runs and tests; see `deepcam`."""
    return deepcam(num_classes, in_channels, width=width, middle_blocks=middle_blocks)
