"""Training augmentation, the `augment` axis: one small set, on the host or on the device.

`basic` = a horizontal flip, a slight scale/shift and a colour jitter; geometry moves image and
mask together (the mask with nearest-neighbour, so labels stay 0/1), the jitter touches the
image only. It is about quality (more varied inputs), not speed, so `+opt=all` leaves it off.

- `HostAugment`: albumentations 2.0.8 on each decoded (or cached) sample, in the DataLoader
  workers. Its Compose keeps its own random generator, which neither torch nor Lightning seeds,
  so forked workers would all draw the same "random" augmentations: segperf.data.seeding's
  `seed_worker` reseeds it (`reseed`) in each worker.
- `DeviceAugment`: the same set with torch ops on a whole batch where it already is (the
  accelerator with `cache=device`), so caching on the device does not mean losing augmentation.
  Same probabilities and ranges; the jitter applies brightness, contrast and saturation in a
  fixed order (albumentations shuffles the order) and bilinear resampling is torch's, so the
  two agree in distribution, not pixel for pixel.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# The basic set, shared by both implementations.
FLIP_P = 0.5
AFFINE_P = 0.5
SCALE = (0.95, 1.05)  # zoom factor
SHIFT = 0.05  # translation, fraction of the width/height, either way
JITTER_P = 0.5
JITTER = 0.2  # brightness, contrast and saturation factors in [1 - JITTER, 1 + JITTER]


def _seed32(seed: int) -> int:
    return int(seed) % 2**32


class HostAugment:
    """albumentations on one `(image uint8 [H, W, 3], mask uint8 [H, W])` sample of tensors."""

    def __init__(self, seed: int = 0) -> None:
        import albumentations as A  # imported only when augmentation is on (~1 s, pulls in OpenCV)
        import cv2

        self.transform = A.Compose(
            [
                A.HorizontalFlip(p=FLIP_P),
                A.Affine(
                    scale=SCALE,
                    translate_percent=(-SHIFT, SHIFT),
                    interpolation=cv2.INTER_LINEAR,
                    mask_interpolation=cv2.INTER_NEAREST,
                    border_mode=cv2.BORDER_CONSTANT,
                    fill=0,
                    fill_mask=0,
                    p=AFFINE_P,
                ),
                A.ColorJitter(brightness=JITTER, contrast=JITTER, saturation=JITTER, hue=0.0, p=JITTER_P),
            ],
            seed=_seed32(seed),
        )

    def reseed(self, seed: int) -> None:
        self.transform.set_random_seed(_seed32(seed))

    def __call__(self, image: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.transform(image=image.numpy(), mask=mask.numpy())
        # a flip returns a negatively strided view, which torch.from_numpy refuses
        return torch.from_numpy(np.ascontiguousarray(out["image"])), torch.from_numpy(np.ascontiguousarray(out["mask"]))


class DeviceAugment:
    """The basic set on a batch `(image uint8 [B, H, W, 3], mask uint8 [B, H, W])` on any device.

    Each sample draws its own flip, affine and jitter; samples that draw "no affine" get the
    identity transform, so no host synchronization is needed to pick them out."""

    def __init__(self, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(_seed32(seed))

    def _uniform(self, n: int, low: float, high: float) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=self.device) * (high - low) + low

    def _chance(self, n: int, p: float) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=self.device) < p

    def __call__(self, image: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = image.shape[0]
        flip = self._chance(b, FLIP_P)
        image = torch.where(flip[:, None, None, None], image.flip(2), image)
        mask = torch.where(flip[:, None, None], mask.flip(2), mask)

        # scale about the centre and shift; affine_grid maps output to input coordinates in
        # [-1, 1], so the inverse: input = (output - 2 * shift) / scale
        moved = self._chance(b, AFFINE_P)
        scale = torch.where(moved, self._uniform(b, *SCALE), 1.0)
        shift_x = torch.where(moved, self._uniform(b, -SHIFT, SHIFT), 0.0)
        shift_y = torch.where(moved, self._uniform(b, -SHIFT, SHIFT), 0.0)
        theta = torch.zeros(b, 2, 3, device=self.device)
        theta[:, 0, 0] = theta[:, 1, 1] = 1 / scale
        theta[:, 0, 2], theta[:, 1, 2] = -2 * shift_x / scale, -2 * shift_y / scale
        x = image.permute(0, 3, 1, 2).float()
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        m = F.grid_sample(mask[:, None].float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)

        x = self._jitter(x)
        image = x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
        return image, m[:, 0].to(torch.uint8)

    def _jitter(self, x: torch.Tensor) -> torch.Tensor:
        """Brightness, contrast, saturation on float [B, 3, H, W] in 0..255, as torchvision does."""
        b = x.shape[0]
        on = self._chance(b, JITTER_P)
        brightness, contrast, saturation = (
            torch.where(on, self._uniform(b, 1 - JITTER, 1 + JITTER), 1.0)[:, None, None, None] for _ in range(3)
        )
        x = (x * brightness).clamp_(0, 255)
        mean = _grey(x).mean(dim=(2, 3), keepdim=True)
        x = ((x - mean) * contrast + mean).clamp_(0, 255)
        grey = _grey(x)
        return ((x - grey) * saturation + grey).clamp_(0, 255)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma of [B, 3, H, W], as [B, 1, H, W]."""
    r, g, b = x.unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b)[:, None]
