"""A small CNN classifier as a plain LightningModule: logs val_acc and val_loss in validation."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class ShapesCNN(L.LightningModule):
    def __init__(self, channels: int = 16, num_classes: int = 3, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.BatchNorm2d(2 * channels),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(2 * channels * 16, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).flatten(1))

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        image, label = batch
        loss = F.cross_entropy(self(image), label)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        image, label = batch
        logits = self(image)
        self.log("val_loss", F.cross_entropy(logits, label), on_epoch=True)
        self.log("val_acc", (logits.argmax(1) == label).float().mean(), on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
