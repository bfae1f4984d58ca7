"""The Carvana LightningDataModule: layout, split, run-size limits and loader settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import SequentialSampler, Subset

from segperf.config import available_cores, segperf_cache_dir
from segperf.data.base import RunDataModule, data_root, evenly_spaced
from segperf.data.cache import DeviceBatches, get_cache
from segperf.data.carvana.augment import DeviceAugment, HostAugment
from segperf.data.carvana.cache import cache_key
from segperf.data.carvana.checks import apply_policy, check_layout
from segperf.data.carvana.dataset import CarvanaDataset
from segperf.data.carvana.layout import Split, scan_layout, split_by_car
from segperf.data.carvana.synthetic import ensure_synthetic
from segperf.data.cold import PageCache, drop_page_cache, warm
from segperf.data.imagefiles import DEFAULT_MAX_PIXELS
from segperf.data.seeding import seed_worker
from segperf.data.skips import RunSkips
from segperf.errors import DataSizeError


class CarvanaDataModule(RunDataModule):
    """Kaggle-layout data from `root`, or the built-in synthetic set when `root` is None.

    One training "epoch" is the whole run: a sampler draws `train_images` indices from
    successive shuffles of the train split (so 3,000 of 4,064 is the seed's ~0.75 epoch, and a
    count larger than the split wraps around without repeating within a pass). Validation uses
    `val_images` evenly spaced samples of the validation split.

    The data-pipeline axes: `decode` (full | reduced, segperf.data.carvana.decode), `cache` (off |
    memory | device, segperf.data.cache; with `device` the loaders are `DeviceBatches`, not
    DataLoaders), `augment` (off | basic, training only, segperf.data.carvana.augment) and `cold_cache`
    (drop the data files from the OS page cache in `setup`, segperf.data.cold).

    The settings arrive checked (segperf.schema: the options by their enums while composing,
    the ranges by check_settings), so the constructor only keeps them.
    """

    # seeds each worker, including the augmentation's own generator (segperf.data.seeding)
    worker_init_fn = staticmethod(seed_worker)

    def __init__(
        self,
        root: str | None = None,
        height: int = 256,
        width: int = 384,
        holdout_frac: float = 0.2,
        train_images: int = 3000,
        val_images: int = 60,
        batch_size: int = 6,
        on_bad_sample: str = "raise",
        check: str = "header",
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        decode: str = "full",
        cache: str = "off",
        augment: str = "off",
        cold_cache: bool = False,
        synthetic: dict[str, Any] | None = None,
        **loader: Any,
    ) -> None:
        # seed, num_workers, prefetch_factor, pin_memory, persistent_workers: segperf.data.base
        super().__init__(train_images=train_images, val_images=val_images, batch_size=batch_size, **loader)
        self.root = root
        self.height, self.width = height, width
        self.holdout_frac = holdout_frac
        self.synthetic = dict(synthetic or {})
        self.on_bad_sample = on_bad_sample
        # data.check (header | decode) and data.max_image_pixels: segperf.data.carvana.checks
        self.check, self.max_image_pixels = check, max_image_pixels
        self.skips = RunSkips(on_bad_sample, max_image_pixels)  # what is left out, at the check and after
        # the data-pipeline axes: segperf.data.carvana.decode, .cache, .augment and .cold
        self.decode, self.cache, self.augment = decode, cache, augment
        self.cold_cache = cold_cache
        self.page_cache: PageCache = warm()
        self.skipped: list[dict[str, str]] = []
        self.split: Split | None = None

    # -- where the data is ------------------------------------------------------------------
    def resolve_root(self) -> Path:
        return data_root(self.root, self.synthetic, ensure_synthetic)

    def prepare_data(self) -> None:
        # rank 0 only: generate the built-in data once, before any rank reads it
        if self.root is None:
            self.resolve_root()

    def setup(self, stage: str | None = None) -> None:
        if self.split is not None:
            return
        root = self.resolve_root()
        # every problem at once: the layout's (an image without a mask, ...) and every file's
        # headers, sizes and JPEG end markers, before any work (~1 s for 5,088 images); with
        # data.check=decode every file decoded too, on all cores
        report = check_layout(
            scan_layout(root),
            check=self.check,
            max_pixels=self.max_image_pixels,
            cache_dir=segperf_cache_dir(),
            decoders=available_cores(),
        )
        samples, self.skipped = apply_policy(report.samples, report, self.on_bad_sample)
        bad = len(report.bad_images)
        decoded = "" if report.decoded is None else f" (decoded {report.decoded:,} files, the rest known before)"
        print(
            f"Checked {report.checked:,} samples{decoded} in {report.seconds:.2f} s: {bad} bad"
            + (f" ({report.counts()}; skipped, data.on_bad_sample=skip)" if bad else "")
            + "."
        )
        self.skips.after_check(self.skipped, report.warnings, [p for s in samples for p in (s.image, s.mask)])
        if self.cold_cache:  # after the checks, which read the first and last bytes of every file
            self.page_cache = drop_page_cache(p for s in samples for p in (s.image, s.mask))
            print(f"segperf: {self.page_cache.message}")
        split = split_by_car(samples, self.holdout_frac)
        if not split.train:
            raise DataSizeError(f"data.holdout_frac={self.holdout_frac} leaves no training cars in {root}")
        if self.val_images > len(split.val):
            raise DataSizeError(
                f"val_images={self.val_images} is more than the {len(split.val)} validation images of {root} "
                f"({len(split.val_cars)} held-out cars); use val_images<={len(split.val)}."
            )
        self.split = split
        self.resolved_root = root
        s = split.summary()
        print(f"Loaded Carvana dataset from ('{root / 'train'}', '{root / 'train_masks'}').")
        print(f"There are {s['images']:,} datapoints ({s['train_images']:,} train, {s['val_images']:,} val).")
        print(f"There are {s['cars']:,} cars ({s['train_cars']:,} train, {s['val_cars']:,} val).")

    def summary(self) -> dict[str, Any]:
        """The `dataset` section of results.json."""
        assert self.split is not None, "call setup() first"
        return {
            "root": str(self.resolved_root),
            "synthetic": self.root is None,
            **self.split.summary(),
            **self.skips.summary(),  # skipped: the check's and the run's; image_warnings
            # cold: the data files were dropped from the OS page cache before the run (cold_cache)
            "page_cache": self.page_cache.state,
            "page_cache_method": self.page_cache.method,
        }

    def train_files(self) -> list[Path]:
        """The files the train loader reads (the loader bench drops them from the page cache)."""
        assert self.split is not None, "call setup() first"
        return [p for s in self.split.train for p in (s.image, s.mask)]

    # -- loaders ----------------------------------------------------------------------------
    def _dataset(self, samples, label: str, train: bool = False) -> CarvanaDataset:
        """`samples` decoded as configured; with cache=memory, served from a cache filled now;
        augmented on the host for training unless the device does it (cache=device)."""
        dataset = CarvanaDataset(samples, self.height, self.width, self.decode, bad=self.skips.reader())
        if self.cache == "memory":
            key = cache_key(self.resolved_root, self.height, self.width, self.decode, samples)
            dataset.bad = self.skips.reader("cache fill")  # a sample that fails is replaced in the cache
            dataset.cache = get_cache("memory", dataset, key, torch.device("cpu"), self.num_workers, label)
            dataset.bad = self.skips.reader()
        if train and self.augment == "basic" and self.cache != "device":
            dataset.augment = HostAugment(self.seed)
        return dataset

    def _device_batches(self, dataset: CarvanaDataset, label: str, sampler, train: bool = False) -> DeviceBatches:
        """cache=device: the split decoded once onto the device, batches indexed out of it there."""
        device = self.cache_device()
        key = cache_key(self.resolved_root, self.height, self.width, self.decode, dataset.samples)
        dataset.bad = self.skips.reader("device cache fill")  # a sample that fails is replaced in the cache
        cache = get_cache("device", dataset, key, device, self.num_workers, label)
        dataset.bad = self.skips.reader()
        augment = DeviceAugment(self.seed, device) if train and self.augment == "basic" else None
        return DeviceBatches(cache, sampler, self.batch_size, augment, dataset)

    def train_dataloader(self):
        assert self.split is not None, "call setup() first"
        dataset = self._dataset(self.split.train, "train", train=True)
        sampler = self.train_sampler(dataset)
        if self.cache == "device":
            loader = self._device_batches(dataset, "train", sampler, train=True)
        else:
            loader = self._loader(dataset, sampler)
        return self._resumable(loader, sampler)

    def val_dataloader(self):
        assert self.split is not None, "call setup() first"
        picked = self.rank_share(evenly_spaced(len(self.split.val), self.val_images))
        if self.cache == "off":
            dataset = CarvanaDataset(self.split.val, self.height, self.width, self.decode, bad=self.skips.reader())
            return self._loader(Subset(dataset, picked))
        # a cache holds only the validation samples used, not the whole held-out split
        dataset = self._dataset([self.split.val[i] for i in picked], "val")
        if self.cache == "device":
            return self._device_batches(dataset, "val", SequentialSampler(range(len(dataset))))
        return self._loader(dataset)
