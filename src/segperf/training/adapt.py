"""Settings that cannot work on this machine: adapt with a recorded notice, or stop.

The choice per setting (docs/troubleshooting.md, "Settings this machine cannot honour"):

- `pin=on` without a CUDA device: adapt. Pinned host memory only speeds up copies to a GPU;
  on a CPU run it would cost page-locking for nothing (torch warns and ignores it anyway), so
  the run goes on with `pin_memory=false` and says so.
- `trainer.accelerator=gpu|cuda` (or `mps`) where torch sees none: stop. The user asked for a
  device explicitly; timing the CPU instead would give numbers that answer another question.
- Reduced precision on a CPU without native bf16/fp16: run, with a notice (segperf.training.trainer).
  It is what was asked and it works, only slowly; the notice says so.
- `compile=on` whose compiler fails at the first call: adapt at that call (SegmentationModule
  falls back to eager and the run records it), since whether a compiler works is only known
  by trying.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, open_dict

from segperf.schema import SettingsError


def _has_cuda() -> bool:
    return torch.cuda.is_available()


def _has_mps() -> bool:
    return torch.backends.mps.is_available()


def adapt_to_machine(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """Change what this machine cannot do, in place; returns `adjusted` for results.json
    ({setting: {requested, used, reason}}). Raises SettingsError for what must stop."""
    accelerator = cfg.trainer.accelerator
    if accelerator in ("gpu", "cuda") and not _has_cuda():
        raise SettingsError(
            [
                f"trainer.accelerator={accelerator}: torch sees no CUDA GPU here (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'none'}); use trainer.accelerator=auto to run on what is "
                "available, or run on a machine with a GPU"
            ]
        )
    if accelerator == "mps" and not _has_mps():
        raise SettingsError(["trainer.accelerator=mps: no Apple GPU here; use trainer.accelerator=auto"])
    adjusted: dict[str, dict[str, Any]] = {}
    runs_on_cuda = _has_cuda() and accelerator in ("auto", "gpu", "cuda")
    if cfg.data.pin_memory and not runs_on_cuda:
        adjusted["data.pin_memory"] = {
            "requested": True,
            "used": False,
            "reason": "no CUDA device: pinned memory only speeds up host-to-GPU copies",
        }
        with open_dict(cfg):
            cfg.data.pin_memory = False
    return adjusted


def adjustment_notice(setting: str, change: dict[str, Any]) -> str:
    return f"{setting}={change['requested']} adjusted to {change['used']}: {change['reason']}"
