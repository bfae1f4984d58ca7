"""The CPU study's CNN (`model=cnn`, with `data=mnist`) and the classifiers' LightningModule.

The seed's network: convolution -> batch norm -> ReLU -> max-pool blocks extract features,
fully connected layers with dropout classify them into 10 digits. Small on purpose: on a CPU
its step time is set by batch size, threads and the data loader, which is what the study varies.
`ClassificationModule` trains it, and the third seed's ResNet-18 (segperf.model.resnet) on an
image folder: grayscale digits [B, H, W] or RGB images [B, H, W, 3], each normalized with its
own per-channel mean and std.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from segperf.model.hook_state import PlainHookState
from segperf.model.module import MemoryFormat, SegmentationModule
from segperf.model.optim import configure_adam
from segperf.model.step_logging import TrainLossLogging
from segperf.quality import Quality

SIDE = 28  # MNIST's image side
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # the usual Normalize((0.1307,), (0.3081,)) of MNIST scripts
TOP_K = 5  # top-5 accuracy, ImageNet's second number, where there are more classes than that


class DigitCNN(nn.Module):
    """`len(channels)` blocks of 3x3 conv (no bias: batch norm follows) -> BatchNorm -> ReLU ->
    2x2 max-pool, then Linear(hidden) -> ReLU -> Dropout -> Linear(num_classes)."""

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        channels: list[int] | tuple[int, ...] = (32, 64),
        hidden: int = 128,
        dropout: float = 0.25,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        previous = in_channels
        for width in channels:
            layers += [
                nn.Conv2d(previous, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            previous = width
        self.features = nn.Sequential(*layers)
        side = SIDE // 2 ** len(channels)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(previous * side * side, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )
        # plain data: saved in checkpoints, and what the FLOP counter rebuilds the net from
        self.config = {
            "in_channels": in_channels,
            "num_classes": num_classes,
            "channels": list(channels),
            "hidden": hidden,
            "dropout": dropout,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def check_input_size(self, height: int, width: int) -> None:
        """The fully connected layers are sized for MNIST's 28x28 digits."""
        if (height, width) != (SIDE, SIDE):
            raise ValueError(f"the digit CNN takes {SIDE}x{SIDE} images; got {height}x{width}")

    def describe(self, height: int = SIDE, width: int = SIDE) -> str:
        """One line per block with its (C, H, W) output, as the U-Net's summary does per level."""
        self.check_input_size(height, width)
        lines = [f"Defined a CNN of {len(self.config['channels'])} conv blocks on {SIDE}x{SIDE} images."]
        side = SIDE
        for block, width in enumerate(self.config["channels"]):
            side //= 2
            lines.append(f"block {block}: conv 3x3 -> batch norm -> ReLU -> max-pool 2x2: ({width}, {side}, {side})")
        params = sum(p.numel() for p in self.parameters())
        lines.append(
            f"fully connected {self.config['hidden']} -> dropout {self.config['dropout']} -> "
            f"{self.config['num_classes']} classes; {params / 1e6:.2f}M parameters."
        )
        return "\n".join(lines)


class ClassificationModule(PlainHookState, TrainLossLogging, L.LightningModule):
    """Cross-entropy and Adam (lr 1e-3; `scheduler` a learning-rate schedule stepped every step,
    see segperf.model.optim.configure_adam); validation accuracy with torchmetrics, and with
    `top5` top-5 accuracy too where there are more than TOP_K classes (with fewer it is 1 for any
    net). model=resnet18 turns it on; the CNN leaves it off, so MNIST's record is as it was.

    Batches arrive as `(image uint8 [B, H, W] or [B, H, W, 3], label int64 [B])`; the float
    conversion, the layout and the normalization by `mean` and `std` (per channel, in 0-1 units;
    MNIST's usual 0.1307 / 0.3081 by default) happen on the device, in `on_after_batch_transfer`."""

    # the run's quality: what the report, the tuner's guard and infer judge it by (segperf.quality)
    quality = Quality("val/accuracy", "max", label="val accuracy")
    # the U-Net module's eager fallback when torch.compile fails at its first call (shared, not copied)
    forward = SegmentationModule.forward
    _fall_back_to_eager = SegmentationModule._fall_back_to_eager

    def __init__(
        self,
        net: nn.Module,
        lr: float = 1e-3,
        memory_format: MemoryFormat = "nchw",
        compile: bool = False,
        mean: Sequence[float] = (MNIST_MEAN,),
        std: Sequence[float] = (MNIST_STD,),
        scheduler: Callable[..., Any] | None = None,
        top5: bool = False,
    ):
        super().__init__()
        # not the scheduler: a functools.partial, and checkpoints hold plain data only
        self.save_hyperparameters(ignore=["net", "scheduler"], logger=False)
        self.net, self.lr, self.memory_format, self.scheduler = net, lr, memory_format, scheduler
        # [1, C, 1, 1] in 0-255 units: the uint8 batch is normalized in one subtract and one divide
        self.register_buffer("mean", torch.tensor([255.0 * m for m in mean]).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor([255.0 * s for s in std]).view(1, -1, 1, 1), persistent=False)
        if memory_format == "channels_last":
            self.net.to(memory_format=torch.channels_last)
        self.compile_fallback: str | None = None
        if compile:
            self.net.compile()  # in place: state_dict keys stay the plain net's
        num_classes = net.config["num_classes"]
        self.val_accuracy = MulticlassAccuracy(num_classes, average="micro")
        top5 = top5 and num_classes > TOP_K
        self.val_top5 = MulticlassAccuracy(num_classes, top_k=TOP_K, average="micro") if top5 else None
        self.val_loss = MeanMetric()  # weighted by batch size

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        image, label = batch
        if image.ndim == 3:  # grayscale [B, H, W] -> [B, 1, H, W]
            image = image.unsqueeze(1)
        else:  # RGB [B, H, W, 3] -> [B, 3, H, W]: a free view whose strides are channels-last
            image = image.permute(0, 3, 1, 2)
            if self.memory_format == "nchw":
                image = image.contiguous()  # the layout conversion memory_format=channels_last avoids
        image = image.float().sub_(self.mean).div_(self.std)  # .float() keeps the strides
        if self.memory_format == "channels_last":
            image = image.contiguous(memory_format=torch.channels_last)
        return image, label.long()

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        image, label = batch
        loss = F.cross_entropy(self(image), label)
        self.log_train_loss(loss, image.shape[0])  # at the steps the logger writes (segperf.model.step_logging)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        image, label = batch
        logits = self(image)
        self.val_accuracy.update(logits.argmax(dim=1), label)
        if self.val_top5 is not None:
            self.val_top5.update(logits, label)
        self.val_loss.update(F.cross_entropy(logits, label), weight=image.shape[0])

    def on_validation_epoch_end(self) -> None:
        metrics = {"val/accuracy": self.val_accuracy.compute(), "val/loss": self.val_loss.compute()}
        if self.val_top5 is not None:
            metrics["val/top5_accuracy"] = self.val_top5.compute()
        for name, value in metrics.items():
            self.log(name, value)
        for metric in (self.val_accuracy, self.val_top5, self.val_loss):
            if metric is not None:
                metric.reset()

    def configure_optimizers(self) -> Any:
        return configure_adam(self, self.lr, self.scheduler)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)  # the validation history
        checkpoint["net_config"] = dict(self.net.config)  # plain data: loads with weights_only=True
