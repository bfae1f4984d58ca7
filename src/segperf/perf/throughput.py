"""Training images/s after warm-up, with validation time kept out.

Lightning's ThroughputMonitor logs a windowed rate (100 batches by default, so short runs log
none) and no run total; this callback produces the run's totals that results.json needs. The
per-phase breakdown is the job of the measurement callbacks.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch


def synchronize(trainer: L.Trainer) -> None:
    """Wait for queued GPU work before reading the host clock. Called only at phase edges (end of
    warm-up, validation start/end, end of training), never per step."""
    device = trainer.strategy.root_device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TrainThroughput(L.Callback):
    def __init__(self, warmup_steps: int = 2) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps={warmup_steps}: must be >= 0")
        self.warmup_steps = warmup_steps
        self.images = self.steps = self.warm_images = 0
        self.start = self.warm_end = self.end = None
        self.validation_s = self.validation_after_warmup_s = 0.0
        self._validation_start: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()
        if self.warmup_steps == 0:
            self.warm_end = self.start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.images += len(batch[0])
        self.steps += 1
        if self.steps == self.warmup_steps:
            synchronize(trainer)
            self.warm_end = time.perf_counter()
            self.warm_images = self.images

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and self.start is not None:
            synchronize(trainer)
            self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validation_start is not None:
            synchronize(trainer)
            elapsed = time.perf_counter() - self._validation_start
            self.validation_s += elapsed
            if self.warm_end is not None:
                self.validation_after_warmup_s += elapsed
            self._validation_start = None

    def on_train_end(self, trainer, pl_module) -> None:
        synchronize(trainer)
        self.end = time.perf_counter()

    def summary(self) -> dict[str, Any]:
        """The `train` section of results.json."""
        end = self.end if self.end is not None else time.perf_counter()
        wall_s = None if self.start is None else end - self.start
        if self.warm_end is not None and self.steps > self.warmup_steps:
            measured_images = self.images - self.warm_images
            measured_s = end - self.warm_end - self.validation_after_warmup_s
            warmup_excluded = True
        else:  # too few steps to leave warm-up out: say so rather than report nothing
            measured_images, warmup_excluded = self.images, False
            measured_s = None if wall_s is None else wall_s - self.validation_s
        return {
            "images": self.images,
            "steps": self.steps,
            "wall_s": wall_s,
            "images_per_s": measured_images / measured_s if measured_s else None,
            "warmup_steps": self.warmup_steps,
            "warmup_s": None if self.warm_end is None or self.start is None else self.warm_end - self.start,
            "warmup_excluded": warmup_excluded,
            "validation_s": self.validation_s,
        }
