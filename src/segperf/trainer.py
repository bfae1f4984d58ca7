"""Building the Lightning Trainer from the `trainer` config and the run size."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision


def steps_for(train_images: int, batch_size: int) -> int:
    return math.ceil(train_images / batch_size)


def validation_interval(val_every_images: int, batch_size: int) -> int:
    """Training batches between validations: `val_every_images` rounded to whole batches."""
    if val_every_images < 1:
        raise ValueError(f"val_every_images={val_every_images}: must be a positive integer")
    return max(1, round(val_every_images / batch_size))


def _runs_on_cpu(accelerator: str) -> bool:
    if accelerator == "cpu":
        return True
    return accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()


def build_trainer(
    trainer_cfg: dict[str, Any], *, val_every_images: int, batch_size: int, **kwargs: Any
) -> L.Trainer:
    """One epoch is the whole run (the DataModule's sampler draws `train_images`); validation
    every `val_every_images`, counted across the run (check_val_every_n_epoch=None lets the
    interval exceed an epoch)."""
    options = dict(trainer_cfg)
    if options.get("precision") == "16-mixed" and _runs_on_cpu(options.get("accelerator", "auto")):
        # Lightning swaps 16-mixed for bf16-mixed on CPU; torch does run fp16 autocast on the
        # CPU, so honour what was asked (a CPU without native fp16 runs it slowly, as it would).
        options.pop("precision")
        kwargs["plugins"] = [MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))]
    return L.Trainer(
        max_epochs=1,
        val_check_interval=validation_interval(val_every_images, batch_size),
        check_val_every_n_epoch=None,
        **options,
        **kwargs,
    )
