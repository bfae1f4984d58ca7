"""PerfScalars: what PerfMonitor logs to the trainer's loggers, during the run and at its end.

During the run, every `log_every_n_steps` after warm-up: `perf/samples_per_s` and
`perf/data_wait_fraction` over the steps since the last time (validation left out of the
window). At the end: each phase's seconds and share, the training rate and MFU; TensorBoard also
gets the per-batch jitter histograms and the resource time series. Lightning's loggers write on
rank 0 only, so every rank may call them.

A part of PerfMonitor (segperf.callbacks.parts), which reads the steps from its PhaseClock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

from segperf.callbacks.phase_clock import PhaseClock
from segperf.perf.jitter import log_histograms
from segperf.perf.phases import FETCH_ACTION


@dataclass
class LiveWindow:
    """The steps since the live scalars were last logged: where the window opened (a step's end,
    moved on by validations inside it), the samples trained and the data wait in it."""

    start: float = 0.0
    samples: float = 0.0
    data_wait_s: float = 0.0

    def open(self, at: float) -> None:
        self.start, self.samples, self.data_wait_s = at, 0.0, 0.0


class PerfScalars(L.Callback):
    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.window = LiveWindow()
        self._validations = 0  # the clock's validations already left out of the window

    def on_train_start(self, trainer, pl_module) -> None:
        self.window.open(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        clock, window = self.clock, self.window
        if not clock.step_times:
            return
        if clock.steps <= clock.warmup_steps:  # the window opens where warm-up ends
            window.open(clock.step_times[-1][1])
            return
        window.samples += clock.step_images[-1] if clock.step_images else 0
        fetches = clock.tap.intervals.get(FETCH_ACTION) if clock.tap is not None else None
        if fetches:
            window.data_wait_s += fetches[-1][1] - fetches[-1][0]
        every = trainer.log_every_n_steps
        if every and clock.steps % every == 0:
            self._log_window(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        validations = self.clock.validation
        if self.window.start:  # the live window leaves validation out
            for start, end in validations[self._validations :]:
                self.window.start += end - start
        self._validations = len(validations)

    def _log_window(self, trainer) -> None:
        window, end = self.window, self.clock.step_times[-1][1]
        if end > window.start:
            metrics = {"perf/samples_per_s": window.samples / (end - window.start)}
            if self.clock.tap is not None:
                metrics["perf/data_wait_fraction"] = window.data_wait_s / (end - window.start)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        window.open(end)

    def log_run(
        self, trainer, results: dict[str, Any], batches: dict[str, list[float]], resources: Any, run_start: float
    ) -> None:
        """The end of the run: scalars through the trainer's own loggers (any kind); TensorBoard
        also gets the jitter histograms, and `resources` (a ResourceMonitor) its time series."""
        metrics = {}
        for phase, row in results["phases"].items():
            metrics[f"phases/{phase}_s"], metrics[f"phases/{phase}_fraction"] = row["wall_s"], row["fraction"]
        throughput = results.get("throughput") or {}
        metrics["perf/train_samples_per_s"] = results["train"].get("images_per_s")
        metrics["perf/mfu"], metrics["perf/measured_mfu"] = throughput.get("mfu"), throughput.get("measured_mfu")
        metrics = {k: float(v) for k, v in metrics.items() if v is not None}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            if isinstance(logger, TensorBoardLogger):
                log_histograms(logger.experiment, batches, trainer.global_step)
        if resources is not None:
            resources.log_series(trainer, run_start)
        for logger in trainer.loggers:
            logger.save()
