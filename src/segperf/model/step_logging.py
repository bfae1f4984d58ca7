"""The training loss, logged at the steps the logger writes rather than at every step.

`self.log` costs about as much Python as every callback hook of a step together (Lightning moves
its result record to the loss's device, builds its metadata and updates the running value: a few
hundred microseconds on a 2-core CPU, ~3% of a 23 ms MNIST step). Lightning's logger connector
only hands a step's on-step metrics to the loggers every `log_every_n_steps` steps, and at the
step where the run stops, so the loss of the steps in between reaches no logger. Logging it only
at the steps Lightning writes gives TensorBoard the same points with the same values.
"""

from __future__ import annotations

from typing import Any

import torch

TRAIN_LOSS = "train/loss"


def logger_writes_this_step(trainer: Any) -> bool:
    """Whether Lightning hands this training step's on-step metrics to its loggers: its own rule
    (every `log_every_n_steps` steps, and when the run stops), read where Lightning keeps it, as
    its LearningRateMonitor does. True where that cannot be read: then every step is logged."""
    connector = getattr(trainer, "_logger_connector", None)
    try:
        return bool(connector.should_update_logs)
    except Exception:  # another Lightning, or a trainer without its loop: log as Lightning would
        return True


class TrainLossLogging:
    """Mixin for a LightningModule: `log_train_loss(loss, batch_size)` in `training_step`."""

    _unlogged_loss: tuple[torch.Tensor, int] | None = None

    def log_train_loss(self, loss: torch.Tensor, batch_size: int) -> None:
        trainer = self._trainer
        if trainer is None or logger_writes_this_step(trainer):
            # a tensor: no host sync here; Lightning reads it when the logger writes. Not on the
            # progress bar, which would read it (a GPU sync) at every refresh, i.e. every step.
            self.log(TRAIN_LOSS, loss, on_step=True, batch_size=batch_size)
            self._unlogged_loss = None
        else:
            # kept (without its autograd graph) in case a callback stops the run at this step
            self._unlogged_loss = (loss.detach(), batch_size)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # A callback's on_train_batch_end (before this hook) may stop the run at this step, and
        # Lightning then writes this step's metrics: its loss, not the one last logged.
        if self._unlogged_loss is not None and self.trainer.should_stop:
            loss, batch_size = self._unlogged_loss
            self.log(TRAIN_LOSS, loss, on_step=True, batch_size=batch_size)
        self._unlogged_loss = None
