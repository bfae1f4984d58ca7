"""What the LightningModules share: each validation's quality, first to last, and the optimizer.

`ValidationHistory` keeps one entry per validation (`{"step": 12, "val_dice": 0.41, ...}`, every
metric the module logs in validation), in checkpoints too, so a resumed run still knows its first
validation. results.json's `quality.val_history` and summary.txt's "first -> last" line come from
it: a run says how far quality came, not only where it ended.

`configure_adam` is Adam with an optional learning-rate schedule from the config (`model.scheduler`,
a `_partial_: true` scheduler that still needs its optimizer), stepped after every training step.
A schedule that needs the run's length (OneCycleLR's `total_steps`) gets it from the trainer,
which knows the steps per rank under DDP too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch


class ValidationHistory:
    """Mixin (before `L.LightningModule`): `remember_validation(metrics)` at each validation's end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.val_history: list[dict[str, float]] = []

    def remember_validation(self, metrics: Mapping[str, Any]) -> None:
        """One entry per validation of the run (not the sanity check): the global step it ran at
        and each metric as a float, named as in results.json (`val/dice` -> `val_dice`)."""
        if self.trainer.sanity_checking:
            return
        entry: dict[str, float] = {"step": int(self.trainer.global_step)}
        entry |= {name.replace("/", "_"): float(value) for name, value in metrics.items()}
        self.val_history.append(entry)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["val_history"] = [dict(entry) for entry in self.val_history]  # plain data

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.val_history = [dict(entry) for entry in checkpoint.get("val_history", [])]


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
