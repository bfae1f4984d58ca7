"""The image-folder LightningDataModule (`data=imagefolder`): a user's own photos, one folder per
class, for the third seed's workload (ResNet-18, `model=resnet18`).

The layout and split are segperf.data.imagefolder.layout, the up-front check of every file
segperf.data.imagefolder.checks, decoding and transforms segperf.data.imagefolder.dataset, the
cache segperf.data.imagefolder.cache and the built-in folder segperf.data.imagefolder.builtin.
Batches are `(image uint8 [B, H, W, 3], label int64 [B])`; the module converts and normalizes
on the device. Every axis of the Carvana pipeline applies the same way: workers, prefetch and
pin through the shared loader (segperf.data.base), `decode` (reduced DCT decode of JPEGs),
`cache` (off | memory | device), `augment` (off | basic: random resized crop + flip) and
`cold_cache`; the run size too (`train_images` drawn from successive shuffles of the training
split, `val_images` evenly spaced over the validation split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import SequentialSampler, Subset

from segperf.config import available_cores, segperf_cache_dir
from segperf.data.base import RunDataModule, data_root, evenly_spaced
from segperf.data.cache import DeviceBatches, get_cache
from segperf.data.cold import PageCache, drop_page_cache, warm
from segperf.data.imagefiles import DEFAULT_MAX_PIXELS
from segperf.data.imagefolder.builtin import ensure_builtin
from segperf.data.imagefolder.cache import LABEL, DeviceCropFlip, cache_key
from segperf.data.imagefolder.checks import apply_policy, check_folder
from segperf.data.imagefolder.dataset import ImageFolderDataset
from segperf.data.imagefolder.layout import ClassSplit, FolderLayout, scan_folder, stratified_split
from segperf.data.seeding import seed_worker
from segperf.data.skips import RunSkips
from segperf.errors import DataLayoutError, DataSizeError


class ImageFolderDataModule(RunDataModule):
    """Images of `root` (ROOT/<class>/... or ROOT/train/<class>/... + ROOT/val/<class>/...), or the
    built-in rendered folder when `root` is None. Settings arrive checked by segperf.schema."""

    worker_init_fn = staticmethod(seed_worker)  # each worker its own crops and flips

    def __init__(
        self,
        root: str | None = None,
        height: int = 96,
        width: int = 96,
        holdout_frac: float = 0.2,
        split_seed: int = 0,
        num_classes: int | None = None,
        train_images: int = 6000,
        val_images: int = 1000,
        batch_size: int = 32,
        on_bad_sample: str = "raise",
        check: str = "header",
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        decode: str = "full",
        cache: str = "off",
        augment: str = "basic",
        cold_cache: bool = False,
        builtin: dict[str, Any] | None = None,
        **loader: Any,
    ) -> None:
        # seed, num_workers, prefetch_factor, pin_memory, persistent_workers: segperf.data.base
        super().__init__(train_images=train_images, val_images=val_images, batch_size=batch_size, **loader)
        self.root = root
        self.height, self.width = height, width
        self.holdout_frac, self.split_seed = holdout_frac, split_seed
        self.num_classes = num_classes
        self.on_bad_sample = on_bad_sample
        # data.check (header | decode) and data.max_image_pixels: segperf.data.imagefolder.checks
        self.check, self.max_image_pixels = check, max_image_pixels
        self.skips = RunSkips(on_bad_sample, max_image_pixels)  # what is left out, at the check and after
        self.decode, self.cache, self.augment = decode, cache, augment
        self.cold_cache = cold_cache
        self.builtin = dict(builtin or {})
        self.page_cache: PageCache = warm()
        self.skipped: list[dict[str, str]] = []
        self.split: ClassSplit | None = None
        self.layout: FolderLayout | None = None

    # -- where the data is ------------------------------------------------------------------
    def resolve_root(self) -> Path:
        return data_root(self.root, self.builtin, ensure_builtin)

    def prepare_data(self) -> None:
        if self.root is None:  # rank 0 only: render the built-in folder once
            self.resolve_root()

    def setup(self, stage: str | None = None) -> None:
        if self.split is not None:
            return
        root = self.resolved_root = self.resolve_root()
        layout = self.layout = scan_folder(root)
        # every problem at once (the folders' and each file's headers and end markers, and with
        # data.check=decode each file decoded), before any work
        report = check_folder(
            layout,
            workers=min(4, 2 * available_cores()),
            check=self.check,
            max_pixels=self.max_image_pixels,
            cache_dir=segperf_cache_dir(),
            decoders=available_cores(),
        )
        kept, self.skipped = apply_policy(report, self.on_bad_sample)
        bad = len(report.problems)
        decoded = "" if report.decoded is None else f" (decoded {report.decoded:,} files, the rest known before)"
        print(
            f"Checked {report.checked:,} images{decoded} in {report.seconds:.2f} s: "
            f"{bad} problem{'s' if bad != 1 else ''}"
            + (f" ({report.counts()}; left out, data.on_bad_sample=skip)" if bad else "")
            + "."
        )
        self.skips.after_check(self.skipped, report.warnings, [s.path for s in kept])
        if self.num_classes is not None and self.num_classes != len(layout.classes):
            raise DataLayoutError(
                f"data.num_classes={self.num_classes}, but {root} has {len(layout.classes)} classes "
                f"({', '.join(layout.classes)}); leave data.num_classes as it is (it counts the class folders)"
            )
        if self.cold_cache:  # after the checks, which read the first and last bytes of every file
            self.page_cache = drop_page_cache(s.path for s in kept)
            print(f"segperf: {self.page_cache.message}")
        self.split = self._split(layout, {s.path for s in kept})
        s = self.split.summary()
        form = "train/ and val/" if layout.val is not None else f"a stratified split, holdout_frac={self.holdout_frac}"
        print(f"Loaded image folder {root}: {s['classes']} classes, {s['images']:,} images ({form}).")
        print(f"There are {s['train_images']:,} training and {s['val_images']:,} validation images.")

    def _split(self, layout: FolderLayout, kept: set[Path]) -> ClassSplit:
        train = [s for s in layout.train if s.path in kept]
        if layout.val is None:
            split = stratified_split(train, layout.classes, self.holdout_frac, self.split_seed, layout.root)
        else:
            split = ClassSplit(train, [s for s in layout.val if s.path in kept], layout.classes)
        if not split.train:
            raise DataSizeError(f"no training images left in {layout.root} (data.holdout_frac={self.holdout_frac})")
        if not split.val:
            where = f"{layout.root / 'val'} has no images of the training classes" if layout.val is not None else (
                f"data.holdout_frac={self.holdout_frac} holds out no image of {layout.root}")  # fmt: skip
            raise DataSizeError(f"no validation images: {where}")
        if self.val_images > len(split.val):
            # a user's folder has whatever it has: validate on all of it, and say so
            print(f"segperf: note: val_images={self.val_images}: the folder has {len(split.val):,}; validating on all.")
        return split

    @property
    def validated(self) -> int:
        assert self.split is not None, "call setup() first"
        return min(self.val_images, len(self.split.val))

    def summary(self) -> dict[str, Any]:
        """The `dataset` section of results.json: the classes with their images, the form, what was left out."""
        assert self.split is not None and self.layout is not None, "call setup() first"
        return {
            "root": str(self.resolved_root),
            "synthetic": self.root is None,
            "format": "imagefolder",
            "form": self.layout.form,
            **self.split.summary(),
            "validated_images": self.validated,
            "ignored_files": self.layout.ignored_files,
            **self.skips.summary(),  # skipped: the check's and the run's; image_warnings
            "page_cache": self.page_cache.state,
            "page_cache_method": self.page_cache.method,
        }

    def train_files(self) -> list[Path]:
        """The files the train loader reads (the loader bench drops them from the page cache)."""
        assert self.split is not None, "call setup() first"
        return [s.path for s in self.split.train]

    # -- loaders ----------------------------------------------------------------------------
    def _dataset(self, samples, label: str, train: bool = False) -> ImageFolderDataset:
        """`samples` decoded as configured; with cache=memory served from a cache filled now."""
        dataset = ImageFolderDataset(
            samples, self.height, self.width, self.decode, train, self.augment, self.seed, bad=self.skips.reader()
        )
        if self.cache == "memory":
            dataset.cache = self._cache("memory", samples, label, torch.device("cpu"))
        return dataset

    def _cache(self, mode: str, samples, label: str, device: torch.device):
        stage = "device cache fill" if mode == "device" else "cache fill"
        # the validation transform; a file that fails is replaced in the cache by the next one's image
        plain = ImageFolderDataset(samples, self.height, self.width, self.decode, bad=self.skips.reader(stage))
        key = cache_key(self.resolved_root, self.height, self.width, self.decode, samples)
        return get_cache(mode, plain, key, device, self.num_workers, label, target=LABEL)

    def _device_batches(self, samples, label: str, sampler, train: bool = False) -> DeviceBatches:
        """cache=device: the split transformed once onto the device, batches indexed out of it there."""
        device = self.cache_device()
        cache = self._cache("device", samples, label, device)
        augment = DeviceCropFlip(self.seed, device) if train and self.augment == "basic" else None
        plain = ImageFolderDataset(samples, self.height, self.width, self.decode, bad=self.skips.reader())
        return DeviceBatches(cache, sampler, self.batch_size, augment, plain)

    def train_dataloader(self):
        assert self.split is not None, "call setup() first"
        samples = self.split.train
        if self.cache == "device":
            sampler = self.train_sampler(range(len(samples)))
            loader = self._device_batches(samples, "train", sampler, train=True)
        else:
            dataset = self._dataset(samples, "train", train=True)
            sampler = self.train_sampler(dataset)
            loader = self._loader(dataset, sampler)
        return self._resumable(loader, sampler)

    def val_dataloader(self):
        assert self.split is not None, "call setup() first"
        picked = self.rank_share(evenly_spaced(len(self.split.val), self.validated))
        if self.cache == "off":
            dataset = ImageFolderDataset(self.split.val, self.height, self.width, self.decode, bad=self.skips.reader())
            return self._loader(Subset(dataset, picked))
        samples = [self.split.val[i] for i in picked]  # a cache holds only the images validated on
        if self.cache == "device":
            return self._device_batches(samples, "val", SequentialSampler(range(len(samples))))
        return self._loader(self._dataset(samples, "val"))
