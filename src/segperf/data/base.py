"""What every segperf DataModule shares: the DataLoader axes (workers, prefetch, pin), a
train loader drawn in a seeded order that resumes mid-run (segperf.data.resumable), and each
rank's share of the data under data-parallel training.

Under DDP every process builds its own loaders. Lightning would normally swap in a
DistributedSampler, but segperf's train loader is a resumable wrapper (which Lightning leaves
alone) and `train_images` counts the images of the whole run, so the sharding is done here,
with `use_distributed_sampler=False` (segperf.training.trainer): the seeded global order is dealt out
rank by rank (rank r takes positions r, r+world, ...), so no image is seen twice within a
pass over the data, across ranks, and the ranks together train on `train_images`.

The run size and the loader settings (`train_images`, `val_images`, `batch_size`, `seed`,
`num_workers`, `prefetch_factor`, `pin_memory`, `persistent_workers`: the same keys in every
conf/data/*.yaml) are taken here, once: a workload's constructor lists its own settings, its
defaults for the run size, and passes the loader's on (`**loader`). It may seed its workers
(`worker_init_fn`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from segperf.config import segperf_cache_dir
from segperf.data.prefetch import ThreadPrefetchLoader
from segperf.data.resumable import ResumableLoader, SkippingSampler
from segperf.errors import DataSizeError


def evenly_spaced(n: int, k: int) -> list[int]:
    """k indices spread over range(n): a validation subset that covers the split, deterministically."""
    return [(i * n) // k for i in range(k)]


def data_root(root: Any, builtin: Any, generate: Callable[..., Path]) -> Path:
    """The folder a workload reads: `data.root` when given, else its built-in data, generated once
    by `generate(cache_dir, **options)` into segperf's cache folder (or the options' cache_dir)."""
    if root is not None:
        return Path(root).expanduser()
    options = dict(builtin)
    return generate(options.pop("cache_dir", None) or segperf_cache_dir(), **options)


class RankShard(Sampler[int]):
    """Rank `rank`'s share of `sampler`'s order: positions rank, rank+world, ... cut to
    len(sampler) // world, so that every rank runs the same number of steps (DDP needs that:
    a rank with one batch more would wait forever for the others' gradients)."""

    def __init__(self, sampler: Sampler[int], rank: int, world: int) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside a world of {world}")
        self.sampler, self.rank, self.world = sampler, rank, world

    def __iter__(self) -> Iterator[int]:
        return islice(iter(self.sampler), self.rank, self.world * len(self), self.world)

    def __len__(self) -> int:
        return len(self.sampler) // self.world  # type: ignore[arg-type]


class RunDataModule(L.LightningDataModule):
    # called in each worker process on start (None: DataLoader's default)
    worker_init_fn: Callable[[int], Any] | None = None
    # where cache=device keeps the data when no trainer runs the module (the loader bench sets
    # the accelerator); under a trainer, the trainer's device
    standalone_device = torch.device("cpu")

    def __init__(
        self,
        *,
        train_images: int,
        val_images: int,
        batch_size: int,
        seed: int = 0,
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = True,
    ) -> None:
        super().__init__()
        self.train_images, self.val_images, self.batch_size = train_images, val_images, batch_size
        self.seed = seed
        # the loader axes (the workers, prefetch and pin groups), read by _loader
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        self.pin_memory, self.persistent_workers = pin_memory, persistent_workers

    def _loader(self, dataset: Dataset, sampler=None):
        workers = self.num_workers
        loader = DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=workers,
            pin_memory=self.pin_memory,
            # with workers, prefetch_factor is DataLoader's own; without, see ThreadPrefetchLoader
            prefetch_factor=self.prefetch_factor if workers else None,
            # re-spawning workers (and their imports) at every validation would be timed as data wait
            persistent_workers=self.persistent_workers and workers > 0,
            worker_init_fn=self.worker_init_fn if workers else None,
        )
        if workers == 0 and self.prefetch_factor:
            return ThreadPrefetchLoader(loader, self.prefetch_factor)
        return loader

    def train_sampler(self, dataset: Dataset | range) -> SkippingSampler:
        """The order the train loader draws: `train_images` from successive seeded shuffles of
        `dataset`; on resume it skips what the interrupted run already trained on."""
        generator = torch.Generator().manual_seed(self.seed)
        order = RandomSampler(dataset, num_samples=self.train_images, generator=generator)
        rank, world = self.rank_and_world()
        if self.train_images < world:
            raise DataSizeError(
                f"train_images={self.train_images} leaves no image for some of the {world} ranks; "
                f"use train_images>={world} (or fewer devices)"
            )
        return SkippingSampler(order if world == 1 else RankShard(order, rank, world))

    def cache_device(self) -> torch.device:
        """Where cache=device keeps the data: the trainer's device, or `standalone_device` without one."""
        return self.trainer.strategy.root_device if self.trainer is not None else self.standalone_device

    def rank_and_world(self) -> tuple[int, int]:
        """This process's global rank and the number of processes (0, 1 without a trainer)."""
        trainer = self.trainer
        return (0, 1) if trainer is None else (trainer.global_rank, trainer.world_size)

    def rank_share(self, indices: list[int]) -> list[int]:
        """This rank's part of an evaluation subset: every world-th index, all of them together
        once (ranks may differ by one image; validation has no gradient to wait for)."""
        rank, world = self.rank_and_world()
        if len(indices) < world:
            # a rank without a validation batch would skip the metrics' cross-rank reduction
            raise DataSizeError(
                f"val_images={len(indices)} leaves no validation image for some of the {world} ranks; "
                f"use val_images>={world}"
            )
        return indices[rank::world]

    def _resumable(self, loader: Iterable, sampler: SkippingSampler) -> ResumableLoader:
        return ResumableLoader(loader, sampler, self.batch_size, self._batches_done)

    def _batches_done(self) -> int:
        """Training batches the trainer completed in this run (what a checkpoint has trained on)."""
        trainer = self.trainer
        return 0 if trainer is None else trainer.fit_loop.epoch_loop.batch_progress.current.completed
