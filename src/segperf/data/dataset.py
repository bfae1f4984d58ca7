"""Decoding one Carvana sample: JPEG -> resized uint8 HWC image, GIF -> resized 0/1 mask."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from segperf.data.layout import Sample


class CarvanaDataset(Dataset):
    """Returns `(image uint8 [H, W, 3], mask uint8 [H, W])` tensors.

    Kept uint8 and HWC on purpose: it is what the decoder produces, it is 4x smaller to move
    than float32, and the module converts both on the device (see SegmentationModule).
    """

    def __init__(self, samples: list[Sample], height: int, width: int) -> None:
        self.samples = samples
        self.size = (width, height)  # PIL's order

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample = self.samples[index]
        try:
            with Image.open(sample.image) as im:
                image = np.asarray(im.convert("RGB").resize(self.size, Image.BILINEAR))
        except OSError as error:
            raise OSError(f"could not decode image {sample.image}: {error}") from error
        try:
            with Image.open(sample.mask) as im:
                # palette indices; nonzero = car. NEAREST keeps the labels crisp.
                mask = np.asarray(im.resize(self.size, Image.NEAREST)) != 0
        except OSError as error:
            raise OSError(f"could not decode mask {sample.mask}: {error}") from error
        return torch.from_numpy(image.copy()), torch.from_numpy(mask.astype(np.uint8))
