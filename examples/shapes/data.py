"""Noisy shapes drawn on the fly: a plain LightningDataModule, as a user writes one.

Each image is drawn in `__getitem__` from its index (deterministic), on the CPU, in numpy: the
loading is real work in the main process unless the DataLoader has workers.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CLASSES = ("circle", "square", "triangle")


def draw(index: int, size: int, seed: int) -> tuple[np.ndarray, int]:
    """One grayscale image (float32, [size, size]) of a random shape, with its class."""
    rng = np.random.default_rng((seed, index))
    label = int(rng.integers(len(CLASSES)))
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    cy, cx = rng.uniform(size * 0.3, size * 0.7, 2)
    r = rng.uniform(size * 0.15, size * 0.3)
    if label == 0:
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    elif label == 1:
        mask = (abs(yy - cy) <= r * 0.8) & (abs(xx - cx) <= r * 0.8)
    else:
        mask = (yy >= cy - r) & (yy <= cy + r) & (abs(xx - cx) <= (yy - (cy - r)) / 2)
    image = mask.astype(np.float32) * rng.uniform(0.6, 1.0)
    image += rng.normal(0.0, 0.25, (size, size)).astype(np.float32)
    # a few blur passes: per-image CPU work of the kind real decoding and augmenting costs
    for _ in range(4):
        image = (image + np.roll(image, 1, 0) + np.roll(image, 1, 1) + np.roll(image, -1, 0)) / 4
    return image, label


class ShapesDataset(Dataset):
    def __init__(self, count: int, size: int, seed: int) -> None:
        self.count, self.size, self.seed = count, size, seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = draw(index, self.size, self.seed)
        return torch.from_numpy(image)[None], label


class ShapesDataModule(L.LightningDataModule):
    def __init__(self, train_count: int = 2048, val_count: int = 256, size: int = 48, batch_size: int = 32) -> None:
        super().__init__()
        self.train_count, self.val_count, self.size, self.batch_size = train_count, val_count, size, batch_size

    def setup(self, stage: str | None = None) -> None:
        self.train_set = ShapesDataset(self.train_count, self.size, seed=0)
        self.val_set = ShapesDataset(self.val_count, self.size, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)
