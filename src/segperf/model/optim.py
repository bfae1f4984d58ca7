"""The optimizer segperf's LightningModules share.

`configure_adam` is Adam with an optional learning-rate schedule from the config (`model.scheduler`,
a `_partial_: true` scheduler that still needs its optimizer), stepped after every training step.
A schedule that needs the run's length (OneCycleLR's `total_steps`) gets it from the trainer,
which knows the steps per rank under DDP too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch


def configure_adam(module: Any, lr: float, scheduler: Callable[..., Any] | None) -> Any:
    """Adam at `lr`; with `scheduler`, Lightning's optimizer dict with the schedule per step."""
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    if scheduler is None:
        return optimizer
    options = {}
    given = getattr(scheduler, "keywords", {})
    if "total_steps" in inspect.signature(scheduler).parameters and given.get("total_steps") is None:
        options["total_steps"] = int(module.trainer.estimated_stepping_batches)
    schedule = scheduler(optimizer, **options)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
