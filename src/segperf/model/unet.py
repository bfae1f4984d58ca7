"""The seed study's 5-level U-Net, as a plain nn.Module (no Lightning inside).

Shape: an input conv to 16 channels; encoder levels of 32, 64, 128, 256, 512 channels, each
two 3x3 conv+ReLU whose activations are summed (a residual sum); 2x2 max-pool between levels;
a decoder that upsamples, concatenates the encoder's skip and applies the same block; a 1x1
output conv to the classes. Upsampling is the seed's "select model operations well" axis:
`upconv` (bilinear x2, then a 3x3 conv) or `deconv` (2x2 stride-2 transposed conv, ~8.6M ->
~7.8M parameters and fewer FLOPs).

Normalization is this project's addition (`norm`): `none` is the seed's plain net, unchanged;
`batch` (BatchNorm) or `group` (GroupNorm, 8 groups) after each block convolution, before its
ReLU. A conv followed by a norm layer has no bias: the norm's shift replaces it (and would
cancel it anyway), as torch's performance-tuning guide advises. With BatchNorm the net trains
at 30-100x the seed's learning rate (3e-3 and 1e-2 on a one-cycle schedule), where the plain
net collapses to predicting no car at all: that is what makes it learn within minutes on a CPU
(docs/BENCHMARKS.md, "Quality").
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from segperf.errors import InputSizeError

Upsample = Literal["upconv", "deconv"]
Norm = Literal["none", "batch", "group"]
# GroupNorm's groups; fewer where a level has under 16 channels, so that each group keeps two
# channels at least (a group of one channel on a 1x1 map has nothing to normalize over)
GROUPS = 8


def make_norm(kind: Norm, channels: int) -> nn.Module:
    if kind == "none":
        return nn.Identity()  # no parameters: the seed's state_dict keys are unchanged
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(GROUPS, max(1, channels // 2)), channels)
    raise ValueError(f"unknown norm {kind!r}: use 'none' (the seed's plain net), 'batch' or 'group'")


class ResidualBlock(nn.Module):
    """Two 3x3 conv(+norm)+ReLU; the output is the sum of both activations."""

    def __init__(self, in_channels: int, out_channels: int, norm: Norm = "none") -> None:
        super().__init__()
        bias = norm == "none"  # a norm layer's shift makes a conv bias redundant
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=bias)
        self.norm1 = make_norm(norm, out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=bias)
        self.norm2 = make_norm(norm, out_channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a1 = self.relu(self.norm1(self.conv1(x)))
        a2 = self.relu(self.norm2(self.conv2(a1)))
        return a1 + a2


def make_upsample(kind: Upsample, in_channels: int, out_channels: int) -> nn.Module:
    if kind == "deconv":
        return nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)
    if kind == "upconv":
        return nn.Sequential(
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
        )
    raise ValueError(f"unknown upsample {kind!r}: use 'upconv' (bilinear + conv) or 'deconv' (transposed conv)")


class DecoderLevel(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, upsample: Upsample, norm: Norm = "none") -> None:
        super().__init__()
        self.up = make_upsample(upsample, in_channels, out_channels)
        self.block = ResidualBlock(2 * out_channels, out_channels, norm)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 2,
        stem_channels: int = 16,
        level_channels: tuple[int, ...] | list[int] = (32, 64, 128, 256, 512),
        upsample: Upsample = "upconv",
        norm: Norm = "none",
    ) -> None:
        super().__init__()
        level_channels = list(level_channels)
        make_norm(norm, 1)  # an unknown norm is refused before any layer is built
        # kept so a checkpoint can rebuild the net without unpickling code (one saved before
        # `norm` existed has no such key: it is the plain net, the default)
        self.config = dict(
            in_channels=in_channels,
            num_classes=num_classes,
            stem_channels=stem_channels,
            level_channels=level_channels,
            upsample=upsample,
            norm=norm,
        )
        self.divisor = 2 ** (len(level_channels) - 1)
        self.stem = nn.Conv2d(in_channels, stem_channels, 3, padding=1)
        ins = [stem_channels, *level_channels[:-1]]
        self.encoders = nn.ModuleList(ResidualBlock(i, o, norm) for i, o in zip(ins, level_channels, strict=True))
        self.pool = nn.MaxPool2d(2)
        self.decoders = nn.ModuleList(
            DecoderLevel(level_channels[i + 1], level_channels[i], upsample, norm)
            for i in range(len(level_channels) - 1)
        )
        self.head = nn.Conv2d(level_channels[0], num_classes, 1)

    def check_input_size(self, height: int, width: int) -> None:
        """The U-Net's own rule (checked here only; a run checks it before any work): each pooling
        halves the input, so both sides are positive multiples of `divisor`. One line per side
        that breaks it, each naming its setting."""
        levels = len(self.encoders) - 1
        problems = [
            f"data.{name}={value}: the U-Net pools {levels} times, so the input size must be a positive multiple "
            f"of {self.divisor} (height and width divisible by {self.divisor}; got {height}x{width}), e.g. 256x384"
            for name, value in (("height", height), ("width", width))
            if value < self.divisor or value % self.divisor
        ]
        if problems:
            raise InputSizeError("\n".join(problems))

    def describe(self, height: int, width: int) -> str:
        """The seed study's model summary for a `height` x `width` input (see `describe`)."""
        return describe(self, height, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input_size(x.shape[-2], x.shape[-1])
        x = self.stem(x)
        skips = []
        for level, encoder in enumerate(self.encoders):
            if level:
                x = self.pool(x)
            x = encoder(x)
            skips.append(x)
        for level in reversed(range(len(self.decoders))):
            x = self.decoders[level](x, skips[level])
        return self.head(x)


def level_shapes(net: UNet, height: int, width: int) -> list[tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """(C, H, W) of each level's encoder and decoder output for one input, traced through a real
    forward of a twin on the meta device (no memory, no compute), so it shows what the net does."""
    net.check_input_size(height, width)
    with torch.device("meta"):
        twin = UNet(**net.config)
    encoder_out: dict[int, tuple[int, ...]] = {}
    decoder_out: dict[int, tuple[int, ...]] = {}
    for level, encoder in enumerate(twin.encoders):
        encoder.register_forward_hook(lambda m, i, o, lv=level: encoder_out.__setitem__(lv, tuple(o.shape[1:])))
    for level, decoder in enumerate(twin.decoders):
        decoder.register_forward_hook(lambda m, i, o, lv=level: decoder_out.__setitem__(lv, tuple(o.shape[1:])))
    with torch.no_grad():
        twin(torch.empty(1, net.config["in_channels"], height, width, device="meta"))
    return [(encoder_out[level], decoder_out.get(level)) for level in range(len(twin.encoders))]


def describe(net: UNet, height: int, width: int) -> str:
    """The seed study's model summary: one line per level with its (C, H, W) feature maps."""

    def fmt(shape: tuple[int, ...] | None) -> str:
        return "none" if shape is None else "(" + ", ".join(f"{d:4d}" for d in shape) + ")"

    lines = [f"Defined a U-Net over {len(net.encoders)} levels, with (C, H, W) shaped feature maps."]
    for level, (enc, dec) in enumerate(level_shapes(net, height, width)):
        lines.append(f"level {level}: encoder {fmt(enc)}, decoder {fmt(dec)}")
    params = sum(p.numel() for p in net.parameters())
    norm = net.config.get("norm", "none")
    lines.append(f"{params / 1e6:.2f}M parameters, upsample={net.config['upsample']}, norm={norm}.")
    return "\n".join(lines)
