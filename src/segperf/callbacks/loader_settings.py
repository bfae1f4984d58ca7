"""A Trainer's training DataLoader and the settings the verdict's advice is given in.

PerfMonitor's verdict advises a user's run in DataLoader and Trainer arguments (segperf.perf.advice);
ShareCores reads the loader's workers. Both read them here, from the trainer, whatever wraps the
loader.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from segperf.config import available_cores


def train_loader(trainer) -> DataLoader | None:
    """The trainer's training DataLoader: the first of several, and the one inside a wrapper that
    keeps it as `.loader` (segperf's resumable loader); None when there is none."""
    loader = trainer.train_dataloader
    for _ in range(8):  # wrappers in wrappers, not a cycle
        if isinstance(loader, DataLoader):
            return loader
        if isinstance(loader, (list, tuple, dict)) and loader:  # several loaders: the first one's settings
            loader = next(iter(loader.values())) if isinstance(loader, dict) else loader[0]
        elif hasattr(loader, "loader"):
            loader = loader.loader
        else:
            return None
    return None


def loader_settings(trainer) -> dict[str, Any]:
    """The knobs a workload segperf did not configure has, as the verdict reads them: its training
    DataLoader's and its Trainer's settings, and this machine's usable cores as the workers hint."""
    cores = available_cores()
    settings: dict[str, Any] = {
        "trainer": {"precision": str(trainer.precision), "log_every_n_steps": trainer.log_every_n_steps},
        "hints": {"workers": max(1, cores)},
    }
    loader = train_loader(trainer)
    if loader is not None:
        settings["dataloader"] = {
            "num_workers": loader.num_workers,
            "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers,
            "batch_size": loader.batch_size,
        }
    return settings
