"""PhaseClock: the run's timeline, batch by batch, from Lightning's hooks.

Marks the edges no profiler action covers (the training loop's bounds, validation windows, the
end of warm-up, the pauses training takes for validation), counts the samples of every batch,
and splits each training step into forward, backward and optimizer step at the hooks Lightning
calls inside it (on_before_backward, on_after_backward). With `record_phases` it also installs
the PhaseTap (segperf.callbacks.profiler_tap) for the fit, which times the data wait, the copy to
the device and each step, and, on CUDA, records events at the same edges of each step without
synchronizing: they are read once, at the end (`device_split`).

All times are `time.perf_counter()`: on a GPU the host clock measures where the *host* waits,
the events what the device did.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from segperf.callbacks.batch_size import BatchSizeFn, batch_size
from segperf.callbacks.profiler_tap import PhaseTap, time_loggers, untime_loggers
from segperf.perf.phases import STEP_PARTS, Interval


class PhaseClock(L.Callback):
    def __init__(
        self, warmup_steps: int = 2, record_phases: bool = True, batch_size_fn: BatchSizeFn | None = None
    ) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps={warmup_steps}: must be >= 0 (0 keeps every step in the throughput)")
        self.warmup_steps = warmup_steps
        self.record_phases = record_phases
        self.batch_size = batch_size_fn or batch_size
        self.tap: PhaseTap | None = None
        self._timed_loggers: list = []
        self.marks: dict[str, float] = {}
        self.validation: list[Interval] = []
        self.validation_images: list[int] = []  # per validation run
        # training paused for validation and the checkpoint saved after it: from validation start
        # to the next training batch (profiler-free, so throughput is the same with measurement off)
        self.pauses: list[Interval] = []
        self._pause_start: float | None = None
        self.steps = self.images = self.warmup_images = 0
        # per training step: (batch start, batch end) on the host clock, and its samples: where the
        # run reached its steady state (segperf.perf.train_rate.steady_start)
        self.step_times: list[Interval] = []
        self.step_images: list[int] = []
        self._validation_start: float | None = None
        self.folded = 0  # steps folded away (segperf.perf.folding): held lists skip them
        self.step_limit: int | None = None  # the steps held from the start, once a fold has happened
        # per training step: (first on_before_backward, last on_after_backward), host clock
        self.backward: list[tuple[float | None, float | None]] = []
        self._batch_start: float | None = None
        self._before_backward: float | None = None
        self._after_backward: float | None = None
        self._events: list[list[Any]] = []  # CUDA: per step, events at start, backward, its end, step end
        self._record_events = False  # CUDA with record_phases: decided once, at on_train_start

    def extend_warmup(self, steps: int) -> None:
        """`steps` more warm-up steps, asked for before the first step ends (segperf.callbacks.share_cores)."""
        if self.steps:
            raise RuntimeError("PhaseClock.extend_warmup: the warm-up is counted from the first step; ask before it")
        self.warmup_steps += steps
        self.marks.pop("warmup_end", None)  # warmup_steps=0 marked it at train start

    def mark(self, name: str) -> float:
        self.marks[name] = now = time.perf_counter()
        return now

    # -- the fit's bounds -----------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        self.marks.setdefault("fit_called", time.perf_counter())
        if stage == "fit" and self.record_phases and self.tap is None:
            self.tap = PhaseTap.install(trainer)
            self._timed_loggers = time_loggers(trainer, self.tap)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._restore(trainer)
            self.mark("fit_returned")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore(trainer)
        self.marks.setdefault("fit_returned", time.perf_counter())

    def _restore(self, trainer) -> None:
        """The trainer's own profiler and loggers back as they were; the intervals are kept."""
        if self.tap is not None:
            self.tap.uninstall(trainer)
        untime_loggers(self._timed_loggers)
        self._timed_loggers = []

    def on_train_start(self, trainer, pl_module) -> None:
        self.mark("train_start")
        self._record_events = self.record_phases and trainer.strategy.root_device.type == "cuda"
        if self.warmup_steps == 0:
            self.marks["warmup_end"] = self.marks["train_start"]

    def on_train_end(self, trainer, pl_module) -> None:
        self._end_pause()
        self.mark("train_end")

    # -- each training step ---------------------------------------------------------------------
    def _end_pause(self, now: float | None = None) -> None:
        if self._pause_start is not None:
            self.pauses.append((self._pause_start, time.perf_counter() if now is None else now))
            self._pause_start = None

    def _device_event(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # queued on the stream: no synchronization
        return event

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()
        self._before_backward = self._after_backward = None
        self._end_pause(self._batch_start)
        if self._record_events:
            self._events.append([self._device_event(), None, None, None])

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self._batch_start is None:  # not inside a training step
            return
        if self._before_backward is None:
            self._before_backward = time.perf_counter()
            if self._events:
                self._events[-1][1] = self._device_event()

    def on_after_backward(self, trainer, pl_module) -> None:
        if self._batch_start is not None:
            self._after_backward = time.perf_counter()  # the last one, under gradient accumulation
            if self._events:
                self._events[-1][2] = self._device_event()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        end = time.perf_counter()
        self.step_times.append((end if self._batch_start is None else self._batch_start, end))
        self._batch_start = None
        self.backward.append((self._before_backward, self._after_backward))
        if self._events:
            self._events[-1][3] = self._device_event()
        self.steps += 1
        self.step_images.append(self.batch_size(batch))
        self.images += self.step_images[-1]
        if self.steps == self.warmup_steps:
            self.warmup_images = self.images
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()  # once: warm-up (compilation) ends when its work is done
                self.mark("warmup_end")
            else:  # the step's own end, so that the steady state starts where a step ended
                self.marks["warmup_end"] = end

    # -- validation -----------------------------------------------------------------------------
    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_start = time.perf_counter()
        if trainer.state.fn == "fit" and "train_start" in self.marks:
            self._pause_start = self._validation_start
        self.validation_images.append(0)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0):
        self.validation_images[-1] += self.batch_size(batch)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validation_start is not None:
            self.validation.append((self._validation_start, time.perf_counter()))
            self._validation_start = None

    # -- a long run -----------------------------------------------------------------------------
    def fold(self, head: int, upto: int) -> dict[str, list]:
        """Take the held steps at positions [head, upto) out of the lists, returning them (their
        totals go on in segperf.perf.folding; `steps`, `images` and the marks are unchanged)."""
        taken = {
            "step_times": self.step_times[head:upto],
            "backward": self.backward[head:upto],
            "step_images": self.step_images[head:upto],
            "events": self._events[head:upto],
        }
        for held in (self.step_times, self.backward, self.step_images, self._events):
            del held[head:upto]
        self.folded += len(taken["step_times"])
        self.step_limit = head
        return taken

    @property
    def forward_s(self) -> list[float]:
        """Per held training step with a backward, batch start to the first backward: the host time
        a rank takes before it joins the gradient all-reduce."""
        return [
            before - start for (start, _), (before, _) in zip(self.step_times, self.backward, strict=False) if before
        ]

    # -- read at the end ------------------------------------------------------------------------
    def intervals(self) -> dict[str, list[Interval]]:
        """The profiled actions' (start, end) times (empty without `record_phases`)."""
        return dict(self.tap.intervals) if self.tap is not None else {}

    def device_step_times(self, events: list[list[Any]] | None = None) -> list[float]:
        """Seconds of device time per training step (CUDA only); synchronizes once."""
        complete = self._complete_events(events)
        return [start.elapsed_time(end) / 1000.0 for start, *_, end in complete]

    def device_split(self, skip: int, events: list[list[Any]] | None = None) -> dict[str, float] | None:
        """Device seconds of forward, backward and optimizer step over the steps after `skip`, from
        the events recorded at the step's edges (CUDA only; None elsewhere)."""
        complete = self._complete_events(events)[skip:]
        if not complete:
            return None
        totals = dict.fromkeys(STEP_PARTS, 0.0)
        for events in complete:
            for part, (a, b) in zip(STEP_PARTS, zip(events, events[1:], strict=False), strict=True):
                totals[part] += a.elapsed_time(b) / 1000.0
        return totals

    def _complete_events(self, events: list[list[Any]] | None = None) -> list[list[Any]]:
        events = self._events if events is None else events
        if not events:
            return []
        torch.cuda.synchronize()
        return [step for step in events if all(e is not None for e in step)]
