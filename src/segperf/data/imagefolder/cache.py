"""The `cache` axis for image folders: each image decoded and transformed once, at the target size.

With the shared decoded-sample cache (segperf.data.cache: its caches, DeviceBatches and size
check), as for every workload: `memory` fills one uint8 tensor of images [N, H, W, 3] in shared
memory, up front, with the run's DataLoader workers, and every worker maps it; `device` keeps it
on the accelerator and indexes batches out of it there (no DataLoader). The second tensor of a
SampleCache holds the labels, int64 [N], where Carvana's holds masks. What is cached is each
image's validation transform (resize to cover, centre crop); training crops and flips from it,
on the host (`augment=basic`, albumentations in the loader) or on the device (DeviceCropFlip). A
crop taken from the cached H x W image rather than from the full photo is a little softer: the
price of decoding each image once. get_cache is told that the target is a LABEL, not a mask.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from segperf.data.cache import Target
from segperf.data.cache import cache_key as files_key
from segperf.data.imagefolder.dataset import CROP_RATIO, CROP_SCALE, FLIP_P
from segperf.data.imagefolder.layout import ImageSample


def cache_key(root: Path, height: int, width: int, decode: str, samples: list[ImageSample]) -> str:
    """A digest of everything the cached pixels depend on: the folder, the size, the decode mode,
    each image's file (name, size, modification time: a changed file is never served) and label."""
    return files_key(
        root, height, width, decode, [s.path for s in samples], ["imagefolder", [s.label for s in samples]]
    )


# what an image folder's cache holds beside each image: its class label
LABEL = Target((), torch.int64)


class DeviceCropFlip:
    """`augment=basic` with `cache=device`: the random resized crop and flip of a whole batch
    `(image uint8 [B, H, W, 3], label [B])` where it already is, with torch ops and no host sync.

    Same distribution as the host's RandomResizedCrop + HorizontalFlip: each image draws an area
    share from CROP_SCALE and a log-uniform aspect from CROP_RATIO (clipped to the image, where
    albumentations retries), a position, and a flip; the crop is resampled bilinearly to H x W."""

    def __init__(self, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(int(seed) % 2**32)

    def _uniform(self, n: int, low: float, high: float) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=self.device) * (high - low) + low

    def __call__(self, image: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = image.shape[0]
        area = self._uniform(b, *CROP_SCALE)
        aspect = torch.exp(self._uniform(b, math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])))
        # crop width and height as fractions of the image's (1 = all of it)
        w = torch.sqrt(area * aspect).clamp(max=1.0)
        h = torch.sqrt(area / aspect).clamp(max=1.0)
        # centre in [-1, 1] coordinates, anywhere the crop still fits
        cx, cy = (self._uniform(b, -1.0, 1.0) * (1 - w)), (self._uniform(b, -1.0, 1.0) * (1 - h))
        flip = torch.where(torch.rand(b, generator=self.generator, device=self.device) < FLIP_P, -1.0, 1.0)
        theta = torch.zeros(b, 2, 3, device=self.device)
        theta[:, 0, 0], theta[:, 0, 2] = w * flip, cx  # output x -> input x (a negative scale flips)
        theta[:, 1, 1], theta[:, 1, 2] = h, cy
        x = image.permute(0, 3, 1, 2).float()
        grid = torch.nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
        x = torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous(), label
