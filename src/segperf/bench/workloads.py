"""What the loader benchmark needs of a data layout (`data.format`): where its data is, its
samples, the loader's dataset, a cache of it and the naive reference loader.

- `carvana`: Kaggle's layout, images with their GIF masks (the default; segperf.data.carvana.datamodule's).
- `imagefolder`: ROOT/<class>/<image> (or ROOT/train/ + ROOT/val/), images with class labels,
  as `data=imagefolder` trains on them: the training transform (random resized crop + flip with
  `data.augment=basic`, else resize + centre crop), a cache of the validation transform.

segperf.bench.loader times the same grid on either; only these pieces differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from segperf.bench.schema import Settings
from segperf.config import segperf_cache_dir
from segperf.data.cache import SampleCache, fill_cache
from segperf.data.carvana.augment import DeviceAugment, HostAugment
from segperf.data.carvana.cache import cache_key
from segperf.data.carvana.dataset import CarvanaDataset
from segperf.data.carvana.decode import decode_image
from segperf.data.carvana.layout import find_samples
from segperf.data.carvana.synthetic import ensure_synthetic
from segperf.data.imagefolder import cache as imagefolder_cache
from segperf.data.imagefolder.builtin import ensure_builtin
from segperf.data.imagefolder.dataset import ImageFolderDataset
from segperf.data.imagefolder.layout import scan_folder

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def _built_in(options: dict[str, Any], ensure) -> Path:
    options = dict(options)
    cache_dir = options.pop("cache_dir", None) or segperf_cache_dir()  # null: the default folder
    return ensure(cache_dir, **options)


class CarvanaLayout:
    """Images and masks in Kaggle's layout; the built-in synthetic set without data.root."""

    def root(self, s: Settings) -> Path:
        return s.root if s.root is not None else _built_in(s.synthetic, ensure_synthetic)

    def samples(self, root: Path) -> list:
        return find_samples(root)

    def files(self, samples: list) -> list[Path]:
        return [p for sample in samples for p in (sample.image, sample.mask)]

    def dataset(self, samples: list, s: Settings, decode: str, augment: bool = False) -> Dataset:
        dataset = CarvanaDataset(samples, s.height, s.width, decode)
        if augment and s.augment == "basic":
            dataset.augment = HostAugment(s.seed)
        return dataset

    def fill(self, samples: list, root: Path, s: Settings, decode: str, workers: int) -> SampleCache:
        key = cache_key(root, s.height, s.width, decode, samples)
        return fill_cache(self.dataset(samples, s, decode), key, torch.device("cpu"), workers, "bench")

    def device_augment(self, s: Settings, device: torch.device):
        return DeviceAugment(s.seed, device)

    def naive_batches(self, samples: list, order: list[int], size: tuple[int, int], batch_size: int) -> Batches:
        """The seed study's first loader: in the training process, sample after sample, the full
        JPEG decoded by PIL and then resized; no workers, no prefetching, no cache."""
        for start in range(0, len(order), batch_size):
            images, masks = [], []
            for i in order[start : start + batch_size]:
                image = Image.open(samples[i].image).convert("RGB").resize(size, Image.BILINEAR)
                mask = Image.open(samples[i].mask).resize(size, Image.NEAREST)
                images.append(torch.from_numpy(np.array(image)))
                masks.append(torch.from_numpy((np.array(mask) != 0).astype(np.uint8)))
            yield torch.stack(images), torch.stack(masks)

    def decoded(self, sample: Any, size: tuple[int, int], decode: str) -> np.ndarray:
        """One image as the model gets it (how far decode=reduced moves the pixels is measured on it)."""
        return decode_image(sample.image, size, decode)


class ImageFolderLayout:
    """Images with class labels, one folder per class; the built-in rendered folder without data.root."""

    def root(self, s: Settings) -> Path:
        return s.root if s.root is not None else _built_in(s.builtin, ensure_builtin)

    def samples(self, root: Path) -> list:
        return scan_folder(root).samples

    def files(self, samples: list) -> list[Path]:
        return [sample.path for sample in samples]

    def dataset(self, samples: list, s: Settings, decode: str, augment: bool = False) -> Dataset:
        return ImageFolderDataset(samples, s.height, s.width, decode, train=augment, augment=s.augment, seed=s.seed)

    def fill(self, samples: list, root: Path, s: Settings, decode: str, workers: int) -> SampleCache:
        key = imagefolder_cache.cache_key(root, s.height, s.width, decode, samples)
        dataset = self.dataset(samples, s, decode)
        return fill_cache(dataset, key, torch.device("cpu"), workers, "bench", target=imagefolder_cache.LABEL)

    def device_augment(self, s: Settings, device: torch.device):
        return imagefolder_cache.DeviceCropFlip(s.seed, device)

    def naive_batches(self, samples: list, order: list[int], size: tuple[int, int], batch_size: int) -> Batches:
        """The seed study's first loader on an image folder: sample after sample in the training
        process, the whole image decoded by PIL, made RGB and resized; no workers, no cache."""
        for start in range(0, len(order), batch_size):
            picked = [samples[i] for i in order[start : start + batch_size]]
            images = [np.array(Image.open(s.path).convert("RGB").resize(size, Image.BILINEAR)) for s in picked]
            yield torch.from_numpy(np.stack(images)), torch.tensor([s.label for s in picked])

    def decoded(self, sample: Any, size: tuple[int, int], decode: str) -> np.ndarray:
        return ImageFolderDataset([sample], size[1], size[0], decode)[0][0].numpy()


LAYOUTS = {"carvana": CarvanaLayout(), "imagefolder": ImageFolderLayout()}
