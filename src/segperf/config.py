"""Config helpers shared by the entry points and the tests."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask (taskset, cgroups, SLURM), not the
    machine's core count, which over-subscribes a constrained job."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def register_resolvers() -> None:
    """`${available_cores:}` in the configs (workers=auto). Idempotent."""
    if not OmegaConf.has_resolver("available_cores"):
        OmegaConf.register_new_resolver("available_cores", available_cores)
