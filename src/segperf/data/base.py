"""What every segperf DataModule shares: the DataLoader axes (workers, prefetch, pin) and a
train loader drawn in a seeded order that resumes mid-run (segperf.data.resumable).

A subclass sets `batch_size`, `seed`, `train_images`, `num_workers`, `prefetch_factor`,
`pin_memory` and `persistent_workers`, and may seed its workers (`worker_init_fn`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from segperf.data.prefetch import ThreadPrefetchLoader
from segperf.data.resumable import ResumableLoader, SkippingSampler


def evenly_spaced(n: int, k: int) -> list[int]:
    """k indices spread over range(n): a validation subset that covers the split, deterministically."""
    return [(i * n) // k for i in range(k)]


class RunDataModule(L.LightningDataModule):
    batch_size: int
    seed: int
    train_images: int
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    # called in each worker process on start (None: DataLoader's default)
    worker_init_fn: Callable[[int], Any] | None = None

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

    def _train_sampler(self, dataset: Dataset) -> SkippingSampler:
        """`train_images` drawn from successive seeded shuffles; on resume it skips what the
        interrupted run already trained on."""
        generator = torch.Generator().manual_seed(self.seed)
        return SkippingSampler(RandomSampler(dataset, num_samples=self.train_images, generator=generator))

    def _resumable(self, loader: Iterable, sampler: SkippingSampler) -> ResumableLoader:
        return ResumableLoader(loader, sampler, self.batch_size, self._batches_done)

    def _batches_done(self) -> int:
        """Training batches the trainer completed in this run (what a checkpoint has trained on)."""
        trainer = self.trainer
        return 0 if trainer is None else trainer.fit_loop.epoch_loop.batch_progress.current.completed
