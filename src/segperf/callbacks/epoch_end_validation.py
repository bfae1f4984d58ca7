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

A speed probe (`probe=True`; the learning runs are not probes) measures speed, not learning: a
user's EarlyStopping with a small patience, reading the one-batch validations a probe makes, would
end it early, and the tuner would read a probe stopped short as a cut, slower one. In a probe each
EarlyStopping still judges the metric (its own state, its log lines) but its request to stop is
taken back, and results.json says so (`early_stopping`: which callbacks, at which steps they would
have stopped). A stop asked for by anything else in the same moment (the probe's time limit,
Lightning's Timer) stands: only the change EarlyStopping's own check made is undone.

Why by hand: Lightning sets `trainer.val_check_batch` from `val_check_interval` before
`on_train_start` and has no setting for "validate at least once an epoch"; the size of the user's
epoch is known only once the loader is built. EarlyStopping has no switch to watch without stopping
(its `patience` counts checks, and a threshold or a non-finite value stops it whatever the patience),
so its two checking hooks (`on_validation_end`, `on_train_epoch_end`, chosen by its
`check_on_train_epoch_end`) are wrapped on the instance for the probe's run and restored after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping

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


# the hooks in which EarlyStopping runs its check (which one: its check_on_train_epoch_end)
STOPPING_HOOKS = ("on_validation_end", "on_train_epoch_end")


class EpochEndValidation(L.Callback):
    """See the module docstring. `probe`: the run is a speed probe, which EarlyStopping must not end."""

    def __init__(self, probe: bool = False) -> None:
        self.probe = probe
        self.section: dict[str, Any] | None = None
        self.held: dict[str, Any] | None = None  # the probe's EarlyStopping callbacks, kept from stopping it
        self._wrapped: list[EarlyStopping] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.probe:
            self.hold_early_stopping(trainer)
        self.validate_at_epoch_ends(trainer)

    def validate_at_epoch_ends(self, trainer: L.Trainer) -> None:
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

    def hold_early_stopping(self, trainer: L.Trainer) -> None:
        """Every EarlyStopping of the run judges as before, but its stop is taken back (a probe)."""
        stoppers = [c for c in trainer.callbacks if isinstance(c, EarlyStopping)]
        if not stoppers:
            return
        self.held = {
            "callbacks": [f"{type(c).__name__}({c.monitor})" for c in stoppers],
            "stops_taken_back": 0,
            "first_stop": None,  # {callback, step, reason}: where the first would have ended the probe
            "why": "a probe measures speed, not learning: EarlyStopping judged its validations but did not stop it",
        }
        for stopper in stoppers:
            for hook in STOPPING_HOOKS:
                setattr(stopper, hook, self._taken_back(stopper, getattr(stopper, hook), self.held))
            self._wrapped.append(stopper)

    @staticmethod
    def _taken_back(stopper: EarlyStopping, check: Callable[..., None], held: dict[str, Any]) -> Callable[..., None]:
        """`check` (one of `stopper`'s hooks), with the stop it asks for taken back and counted in `held`."""

        def hook(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            before = trainer.should_stop
            check(trainer, pl_module)
            if trainer.should_stop and not before:  # EarlyStopping's own stop: the one set just now
                trainer.should_stop = False
                held["stops_taken_back"] += 1
                if held["first_stop"] is None:
                    held["first_stop"] = {
                        "callback": f"{type(stopper).__name__}({stopper.monitor})",
                        "step": trainer.global_step,
                        "reason": stopper.stopping_reason_message,
                    }

        return hook

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for stopper in self._wrapped:  # the callbacks' own hooks again (the class's)
            for hook in STOPPING_HOOKS:
                stopper.__dict__.pop(hook, None)
        self._wrapped = []

    def record(self, results: dict[str, Any]) -> None:
        """results.json `epoch_end_validation`: present when the run's validation was moved, or a
        probe's EarlyStopping was kept from stopping it (`early_stopping`)."""
        if self.section is None and self.held is None:
            return
        results[SECTION] = {**(self.section or {}), **({"early_stopping": self.held} if self.held else {})}
