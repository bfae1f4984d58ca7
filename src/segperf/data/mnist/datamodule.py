"""MNIST for the CPU study (`data=mnist`): the IDX files from `root`, or the built-in digits.

Batches are `(image uint8 [B, 28, 28], label int64 [B])`: the whole split is read into one
uint8 tensor at set-up (47 MB for MNIST's 60,000 training images) and samples are indexed out
of it; the model's module converts to float and normalizes on the device, as the U-Net's does.
The loader settings (workers, prefetch, pin) and the run size work as for Carvana, and the train
loader resumes mid-run the same way (segperf.data.resumable).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, Subset

from segperf.data.base import RunDataModule, data_root, evenly_spaced
from segperf.data.mnist.digits import FILES, SIDE, ensure_builtin
from segperf.data.mnist.idx import IdxFormatError, read_idx
from segperf.errors import DataLayoutError, DataSizeError, SegperfError


def find_idx(root: Path, name: str) -> Path:
    """`name` or `name.gz` in `root`, or in `root/MNIST/raw` (torchvision's download layout)."""
    for folder in (root, root / "MNIST" / "raw"):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataLayoutError(
        f"data.root={root}: no {name} (or {name}.gz) there or in its MNIST/raw; expected MNIST's four IDX files "
        f"({', '.join(n for pair in FILES.values() for n in pair)})"
    )


def read_split(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images uint8 [N, 28, 28] and labels int64 [N] of MNIST's "train" or "test" split."""
    images_file, labels_file = (find_idx(root, name) for name in FILES[split])
    images, labels = read_idx(images_file, ndim=3), read_idx(labels_file, ndim=1)
    if images.shape[1:] != (SIDE, SIDE) or len(images) != len(labels):
        raise IdxFormatError(
            f"{images_file}: {len(images):,} images of {images.shape[1]}x{images.shape[2]} with {len(labels):,} "
            f"labels in {labels_file.name}; expected one label per {SIDE}x{SIDE} image"
        )
    if len(labels) and int(labels.max()) > 9:
        raise IdxFormatError(f"{labels_file}: a label of {int(labels.max())}; MNIST's labels are the digits 0-9")
    return torch.from_numpy(images.astype("uint8", copy=False)), torch.from_numpy(labels.astype("int64"))


def read_splits(root: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Both splits, {"train": ..., "test": ...}, with every problem of the four files listed at
    once (missing, empty, cut short, not IDX, images and labels that do not match): one
    DataLayoutError, a headline and a line per problem."""
    problems: list[str] = []
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for split in FILES:
        try:
            splits[split] = read_split(root, split)
        except SegperfError:
            problems += _split_problems(root, split)
    if problems:
        noun = "problem" if len(problems) == 1 else "problems"
        raise DataLayoutError(
            "\n".join(
                [
                    f"{len(problems)} {noun} with the MNIST files in {root}: fix or replace them (MNIST's four IDX "
                    "files, plain or .gz), or leave data.root unset to use the built-in digits.",
                    *(f"- {problem}" for problem in problems),
                ]
            )
        )
    return splits


def _split_problems(root: Path, split: str) -> list[str]:
    """Each problem of one split's two files, not only the first."""
    problems: list[str] = []
    for name in FILES[split]:
        try:
            read_idx(find_idx(root, name), ndim=3 if "images" in name else 1)
        except DataLayoutError:
            problems.append(f"{root / name}: missing (nor {name}.gz, there or in MNIST/raw)")
        except IdxFormatError as error:
            problems.append(str(error))
    if not problems:  # each file is fine on its own: they do not match
        try:
            read_split(root, split)
        except SegperfError as error:
            problems.append(str(error))
    return problems


class DigitsDataset(Dataset):
    """Indexes one split held in memory; a sample is (uint8 [28, 28], label)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


@dataclass
class DigitsSplit:
    train: DigitsDataset
    val: DigitsDataset


class MnistDataModule(RunDataModule):
    """Trains on MNIST's training file and validates on `val_images` evenly spaced images of its
    test file. One training "epoch" is the whole run: `train_images` drawn from successive
    shuffles of the training split, as for Carvana. Carvana's data-pipeline axes (decode,
    cache, augment) are not this workload's: data/mnist.yaml has no such keys.
    """

    height = width = SIDE  # the model's input size (the measurement counts FLOPs per image with it)

    def __init__(
        self,
        root: str | None = None,
        train_images: int = 60000,
        val_images: int = 10000,
        batch_size: int = 64,
        builtin: dict[str, Any] | None = None,
        **loader: Any,
    ) -> None:
        # seed, num_workers, prefetch_factor, pin_memory, persistent_workers: segperf.data.base
        super().__init__(train_images=train_images, val_images=val_images, batch_size=batch_size, **loader)
        self.root = root
        self.builtin = dict(builtin or {})
        self.split: DigitsSplit | None = None

    def resolve_root(self) -> Path:
        return data_root(self.root, self.builtin, ensure_builtin)

    def prepare_data(self) -> None:
        if self.root is None:  # rank 0 only: render the built-in digits once
            self.resolve_root()

    def setup(self, stage: str | None = None) -> None:
        if self.split is not None:
            return
        root = self.resolve_root()
        if not root.is_dir():
            raise DataLayoutError(f"data.root={root} does not exist")
        splits = read_splits(root)  # every problem of the four files at once
        train, test = splits["train"], splits["test"]
        if self.val_images > len(test[1]):
            raise DataSizeError(
                f"val_images={self.val_images} is more than the {len(test[1]):,} test images of {root}; "
                f"use val_images<={len(test[1])}."
            )
        picked = evenly_spaced(len(test[1]), self.val_images)
        self.split = DigitsSplit(DigitsDataset(*train), DigitsDataset(test[0][picked], test[1][picked]))
        self.resolved_root, self.test_images = root, len(test[1])
        print(f"Loaded MNIST-format digits from {root}: {len(train[1]):,} train, {len(test[1]):,} test images.")

    def summary(self) -> dict[str, Any]:
        """The `dataset` section of results.json."""
        assert self.split is not None, "call setup() first"
        train = len(self.split.train)
        return {
            "root": str(self.resolved_root),
            "synthetic": self.root is None,
            "format": "idx",
            "images": train + self.test_images,
            "train_images": train,
            "val_images": self.test_images,
            "classes": 10,
        }

    def train_dataloader(self):
        assert self.split is not None, "call setup() first"
        sampler = self.train_sampler(self.split.train)
        return self._resumable(self._loader(self.split.train, sampler), sampler)

    def val_dataloader(self):
        assert self.split is not None, "call setup() first"
        val = self.split.val
        share = self.rank_share(list(range(len(val))))
        return self._loader(val if len(share) == len(val) else Subset(val, share))
