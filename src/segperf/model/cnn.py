"""The CPU study's CNN (`model=cnn`, with `data=mnist`) and its LightningModule.

The seed's network: convolution -> batch norm -> ReLU -> max-pool blocks extract features,
fully connected layers with dropout classify them into 10 digits. Small on purpose: on a CPU
its step time is set by batch size, threads and the data loader, which is what the study varies.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from segperf.model.history import ValidationHistory, configure_adam
from segperf.model.module import MemoryFormat, SegmentationModule

SIDE = 28  # MNIST's image side
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # the usual Normalize((0.1307,), (0.3081,)) of MNIST scripts


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


class ClassificationModule(ValidationHistory, L.LightningModule):
    """Cross-entropy and Adam (lr 1e-3); validation accuracy with torchmetrics.

    Batches arrive as `(image uint8 [B, 28, 28], label int64 [B])`; the float conversion and
    MNIST's usual normalization happen on the device, in `on_after_batch_transfer`."""

    # what train.py copies from the logged metrics into results.json's `quality`
    quality_metrics = ("val/accuracy", "val/loss")
    # the U-Net module's eager fallback when torch.compile fails at its first call (shared, not copied)
    forward = SegmentationModule.forward
    _fall_back_to_eager = SegmentationModule._fall_back_to_eager

    def __init__(self, net: DigitCNN, lr: float = 1e-3, memory_format: MemoryFormat = "nchw", compile: bool = False):
        super().__init__()
        self.save_hyperparameters(ignore=["net"], logger=False)
        self.net, self.lr, self.memory_format = net, lr, memory_format
        if memory_format == "channels_last":
            self.net.to(memory_format=torch.channels_last)
        self.compile_fallback: str | None = None
        if compile:
            self.net.compile()  # in place: state_dict keys stay the plain net's
        self.val_accuracy = MulticlassAccuracy(net.config["num_classes"], average="micro")
        self.val_loss = MeanMetric()  # weighted by batch size

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        image, label = batch
        image = image.unsqueeze(1).float().sub_(255.0 * MNIST_MEAN).div_(255.0 * MNIST_STD)  # [B, 1, 28, 28]
        if self.memory_format == "channels_last":
            image = image.contiguous(memory_format=torch.channels_last)
        return image, label.long()

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        image, label = batch
        loss = F.cross_entropy(self(image), label)
        self.log("train/loss", loss, on_step=True, batch_size=image.shape[0])  # a tensor: no host sync here
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        image, label = batch
        logits = self(image)
        self.val_accuracy.update(logits.argmax(dim=1), label)
        self.val_loss.update(F.cross_entropy(logits, label), weight=image.shape[0])

    def on_validation_epoch_end(self) -> None:
        metrics = {"val/accuracy": self.val_accuracy.compute(), "val/loss": self.val_loss.compute()}
        for name, value in metrics.items():
            self.log(name, value)
        self.remember_validation(metrics)  # quality.first_val_accuracy, quality.val_history
        self.val_accuracy.reset()
        self.val_loss.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return configure_adam(self, self.lr, None)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)  # the validation history
        checkpoint["net_config"] = dict(self.net.config)  # plain data: loads with weights_only=True
