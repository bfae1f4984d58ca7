"""EpochEndValidation: a tuner's run that crosses an epoch end validates before it, when the module
or its callbacks watch a validation metric.

The tuner shapes its runs (probes, learning runs, the final side by side) with a run size of its
own: `train_images` and `val_every_images` that may pass the end of a user's training split, which
a user's data module repeats epoch after epoch (segperf.training.workload). What the user's module
does at an epoch's end then runs as in any run of theirs: ReduceLROnPlateau on `val/loss` stepped
once an epoch (lightning-hydra-template's default), EarlyStopping, ModelCheckpoint(monitor=...). Each
reads a metric that only a validation logs, and Lightning stops the run when it is not there yet
("ReduceLROnPlateau conditioned on metric val/loss which is not available"): a failure of the
probe's size, not of the configuration it measures.

So when something watches a metric and the run will cross an epoch end before its first
validation, the run validates at every epoch's end instead (on the few batches `val_images` gives
a probe), as a real run with its validation inside each epoch does. Validation time is a pause
the probe's rate leaves out (segperf.callbacks.steady_probe). A run whose epochs are as long as the
run (segperf's own data modules draw `train_images` in one epoch), or whose module watches nothing,
is left as it is.

Why by hand: Lightning sets `trainer.val_check_batch` from `val_check_interval` before
`on_train_start` and has no setting for "validate at least once an epoch"; the size of the user's
epoch is known only once the loader is built.
"""

from __future__ import annotations

from typing import Any

import lightning as L

SECTION = "epoch_end_validation"  # results.json's key


def watchers(trainer: L.Trainer) -> list[str]:
    """Who watches a logged metric, as `name(metric)`: the lr schedulers given a `monitor` (a
    ReduceLROnPlateau) and the callbacks with a `monitor` (EarlyStopping, ModelCheckpoint(monitor=))."""
    found = [
        f"{type(config.scheduler).__name__}({config.monitor})"
        for config in trainer.lr_scheduler_configs
        if getattr(config, "monitor", None)
    ]
    found += [
        f"{type(callback).__name__}({callback.monitor})"
        for callback in trainer.callbacks
        if isinstance(getattr(callback, "monitor", None), str) and callback.monitor
    ]
    return found


class EpochEndValidation(L.Callback):
    def __init__(self) -> None:
        self.section: dict[str, Any] | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.num_training_batches
        planned = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        every = trainer.val_check_batch
        if not isinstance(epoch, int) or epoch <= 0 or not trainer.limit_val_batches:
            return  # an endless loader has no epoch end; a run without validation has nothing to move
        if planned is not None and planned <= epoch:
            return  # the run ends inside its first epoch
        if isinstance(every, (int, float)) and every <= epoch:
            return  # it validates within each epoch already
        watching = watchers(trainer)
        if not watching:
            return
        trainer.val_check_batch = epoch  # the training loop reads it at every batch
        self.section = {
            "epoch_batches": epoch,
            "every_batches_before": every if isinstance(every, int) else None,
            "watched_by": watching,
            "why": f"{', '.join(watching)} read a validation metric at the epoch's end ({epoch} batches), before "
            "this run's first validation: it validates at every epoch's end instead",
        }

    def record(self, results: dict[str, Any]) -> None:
        """results.json `epoch_end_validation`: present when the run's validation was moved."""
        if self.section is not None:
            results[SECTION] = self.section
