"""The Lightning Trainer, instantiated from the `trainer` config, and what reduced precision
costs on this CPU."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.plugins.precision import MixedPrecision

from segperf.config import plain_config
from segperf.training.callback_dispatch import skip_empty_batch_hooks


def runs_on_cpu(accelerator: str) -> bool:
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
    if wanted is None or not runs_on_cpu(accelerator):
        return None
    flags = cpu_flags() if flags is None else flags
    if flags is None or flags & set(wanted):
        return None
    return (
        f"precision {precision} on a CPU without {' or '.join(wanted)}: torch emulates it, expect it to be "
        "several times slower than fp32 here (it is the fast choice on recent GPUs and CPUs)."
    )


def build_trainer(trainer_cfg: Any, *, plugins: list | None = None, **objects: Any) -> L.Trainer:
    """`instantiate(cfg.trainer)` with the run's objects (callbacks, logger, profiler, plugins),
    whose callbacks then get only the per-batch hooks they act in (segperf.training.callback_dispatch).

    One adjustment: Lightning swaps 16-mixed for bf16-mixed on a CPU, but torch does run fp16
    autocast there, so honour what was asked with the plugin Lightning would use on a GPU (a CPU
    without native fp16 runs it slowly, as it would any emulated type)."""
    options = plain_config(trainer_cfg)
    plugins = list(plugins or [])
    if options["precision"] == "16-mixed" and runs_on_cpu(options["accelerator"]):
        plugins.append(MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu")))
        del options["precision"]
    trainer = instantiate(options, plugins=plugins, **objects)
    skip_empty_batch_hooks(trainer.callbacks)  # Lightning's own (checkpoint, progress bar) included
    return trainer
