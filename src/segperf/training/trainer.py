"""Building the Lightning Trainer from the `trainer` config and the run size."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision


def validation_interval(val_every_images: int, batch_size: int) -> int:
    """Training batches between validations: `val_every_images` rounded to whole batches."""
    if val_every_images < 1:
        raise ValueError(f"val_every_images={val_every_images}: must be a positive integer")
    return max(1, round(val_every_images / batch_size))


def _runs_on_cpu(accelerator: str) -> bool:
    if accelerator == "cpu":
        return True
    return accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()


# CPU instruction-set flags that make reduced-precision autocast fast; without them torch
# emulates the type (measured on an AVX2-only EPYC: bf16 autocast 16x slower than fp32).
NATIVE_CPU_FLAGS = {"bf16-mixed": ("avx512_bf16", "amx_bf16"), "16-mixed": ("avx512_fp16", "amx_fp16")}


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo; None where that cannot be read (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def precision_notice(precision: str, accelerator: str, flags: set[str] | None = None) -> str | None:
    """A one-line warning when reduced precision will run emulated, hence slowly, on this CPU."""
    wanted = NATIVE_CPU_FLAGS.get(precision)
    if wanted is None or not _runs_on_cpu(accelerator):
        return None
    flags = cpu_flags() if flags is None else flags
    if flags is None or flags & set(wanted):
        return None
    return (
        f"precision {precision} on a CPU without {' or '.join(wanted)}: torch emulates it, expect it to be "
        "several times slower than fp32 here (it is the fast choice on recent GPUs and CPUs)."
    )


def build_trainer(trainer_cfg: dict[str, Any], *, val_every_images: int, batch_size: int, **kwargs: Any) -> L.Trainer:
    """One epoch is the whole run (the DataModule's sampler draws `train_images`); validation
    every `val_every_images`, counted across the run (check_val_every_n_epoch=None lets the
    interval exceed an epoch)."""
    options = dict(trainer_cfg)
    if options.get("precision") == "16-mixed" and _runs_on_cpu(options.get("accelerator", "auto")):
        # Lightning swaps 16-mixed for bf16-mixed on CPU; torch does run fp16 autocast on the
        # CPU, so honour what was asked (a CPU without native fp16 runs it slowly, as it would).
        options.pop("precision")
        plugin = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
        kwargs["plugins"] = [*kwargs.get("plugins", []), plugin]
    return L.Trainer(
        max_epochs=1,
        val_check_interval=validation_interval(val_every_images, batch_size),
        check_val_every_n_epoch=None,
        # the DataModules shard by rank themselves (segperf.data.base): the train loader is a
        # resumable wrapper Lightning would not shard, and train_images counts the whole run
        use_distributed_sampler=False,
        **options,
        **kwargs,
    )
