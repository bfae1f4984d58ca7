"""ResNet-18 (He et al. 2015), the third seed's network (`model=resnet18`), as a plain nn.Module.

Written here rather than imported: torchvision's PyPI wheel does not load with the CPU torch
build this project pins (its compiled operators are built for the CUDA build), and the net is
small. It is the standard one, layer for layer, so its parameter count is torchvision's
(11,689,512 at 1000 classes): a 7x7 stride-2 stem conv -> BatchNorm -> ReLU -> 3x3 stride-2
max-pool, four stages of two BasicBlocks (64, 128, 256, 512 channels; stages 2-4 halve the size
in their first block, whose shortcut is a strided 1x1 conv -> BatchNorm), a global average pool
and a fully connected layer. Every conv is followed by a BatchNorm, so no conv has a bias (the
norm's shift replaces it). Initialised as torchvision does: Kaiming-normal convs, BatchNorm
weight 1 and bias 0, and each block's last BatchNorm weight 0 ("zero-init residual"), so every
block starts as the identity, which lets a randomly initialised net train at a high learning
rate from the first step (segperf.model.cnn.ClassificationModule's one-cycle schedule).
"""

from __future__ import annotations

import torch
from torch import nn

from segperf.errors import InputSizeError

STAGES = (64, 128, 256, 512)  # channels of the four stages
BLOCKS = (2, 2, 2, 2)  # BasicBlocks per stage: ResNet-18
DOWNSAMPLE = 32  # stem conv /2, max-pool /2, three strided stages /2 each
# the smallest input side: the last stage's map is then 2x2 at least, so that BatchNorm in training
# has more than one value per channel even for a batch of one image (a run's last batch, the FLOP count)
MIN_SIDE = 2 * DOWNSAMPLE


class BasicBlock(nn.Module):
    """3x3 conv -> BN -> ReLU -> 3x3 conv -> BN, plus the shortcut, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:  # the shortcut must match the new shape
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class ResNet18(nn.Module):
    """ResNet-18 for `num_classes` classes; any input of at least MIN_SIDE x MIN_SIDE (the global
    pool takes whatever size the last stage has), e.g. 96x96 or ImageNet's 224x224."""

    def __init__(self, in_channels: int = 3, num_classes: int = 1000) -> None:
        super().__init__()
        # plain data: saved in checkpoints, and what the FLOP counter rebuilds the net from
        self.config = {"in_channels": in_channels, "num_classes": num_classes}
        self.conv1 = nn.Conv2d(in_channels, STAGES[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(STAGES[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, previous = [], STAGES[0]
        for index, (channels, blocks) in enumerate(zip(STAGES, BLOCKS, strict=True)):
            stride = 1 if index == 0 else 2
            stage = [BasicBlock(previous, channels, stride)] + [
                BasicBlock(channels, channels) for _ in range(blocks - 1)
            ]
            stages.append(nn.Sequential(*stage))
            previous = channels
        # torchvision's names (layer1 ... layer4, fc), so its state_dict keys line up with these
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(previous, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for module in self.modules():
            if isinstance(module, BasicBlock):
                nn.init.zeros_(module.bn2.weight)  # each block starts as the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))

    def check_input_size(self, height: int, width: int) -> None:
        """At least MIN_SIDE on both sides; a smaller input is refused before any work rather
        than at the first step (or, for a 1x1 last stage, at a batch of one image)."""
        if height < MIN_SIDE or width < MIN_SIDE:
            raise InputSizeError(
                f"data.height={height}, data.width={width}: ResNet-18 halves its input five times and its "
                f"batch norm needs a last map of 2x2 at least, so it takes {MIN_SIDE}x{MIN_SIDE} or more; "
                "e.g. data.height=96 data.width=96"
            )

    def describe(self, height: int, width: int) -> str:
        """One line per stage with its (C, H, W) output, as the U-Net's summary does per level."""
        self.check_input_size(height, width)
        lines = [f"Defined a ResNet-18 (BasicBlocks {'-'.join(map(str, BLOCKS))}) on {height}x{width} images."]
        h, w = -(-height // 4), -(-width // 4)  # stem conv and max-pool, each /2 rounding up
        lines.append(f"stem: conv 7x7/2 -> batch norm -> ReLU -> max-pool 3x3/2: ({STAGES[0]}, {h}, {w})")
        for index, channels in enumerate(STAGES):
            if index:
                h, w = -(-h // 2), -(-w // 2)
            lines.append(f"stage {index + 1}: {BLOCKS[index]} basic blocks: ({channels}, {h}, {w})")
        params = sum(p.numel() for p in self.parameters())
        lines.append(
            f"global average pool -> fully connected -> {self.config['num_classes']} classes; "
            f"{params / 1e6:.2f}M parameters."
        )
        return "\n".join(lines)
