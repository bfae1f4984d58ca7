"""Where the wall time of a run went: phases built from Lightning's own profiler records.

Lightning's SimpleProfiler already times every loop step and hook (`train_dataloader_next`,
`batch_to_device`, `run_training_batch`, `save_checkpoint`, each callback hook) but keeps only
durations, summed per action. A phase table needs *when* each call happened, so that nested
and overlapping records (a batch_to_device inside a validation, a progress-bar refresh inside
the warm-up) are counted once and the phases add up to the run's wall time. `PhaseProfiler`
keeps the (start, end) of every call; `PhaseClock` (a callback) adds the few edges no profiler
action marks (validation windows, the end of warm-up, the training loop's bounds), and
`account_phases` lays all of it on one timeline.

All times are `time.perf_counter()` (the clock SimpleProfiler and the resource sampler use).
On a GPU the host clock measures where the *host* waits; CUDA events (no synchronization in
the hot path, read once at the end) give each step's device time alongside.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.profilers import SimpleProfiler

from segperf.perf.phase_names import PHASES

Interval = tuple[float, float]

# Lightning profiler action -> phase (exact names, then prefixes for callback hooks).
ACTION_PHASES = {
    "[_TrainingEpochLoop].train_dataloader_next": "data_wait",
    "run_training_batch": "train_step",
    "save_checkpoint": "checkpoint",
    "segperf.log_metrics": "logging",
}
ACTION_PREFIXES = {
    "[Strategy]": ("batch_to_device", ".batch_to_device"),
    "[Callback]TQDMProgressBar": ("logging", ""),
    "[Callback]RichProgressBar": ("logging", ""),
}


def phase_of_action(action: str) -> str | None:
    if action in ACTION_PHASES:
        return ACTION_PHASES[action]
    for prefix, (phase, suffix) in ACTION_PREFIXES.items():
        if action.startswith(prefix) and action.endswith(suffix):
            return phase
    return None


class PhaseProfiler(SimpleProfiler):
    """SimpleProfiler that also keeps the (start, end) of each call of the actions segperf
    turns into phases. Its own report still goes to `dirpath/filename` as Lightning writes it."""

    def __init__(self, dirpath: str | None = None, filename: str | None = None) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.intervals: dict[str, list[Interval]] = defaultdict(list)

    def stop(self, action_name: str) -> None:
        start = self.current_actions.get(action_name)
        super().stop(action_name)
        if start is not None and phase_of_action(action_name) is not None:
            self.intervals[action_name].append((start, start + self.recorded_durations[action_name][-1]))

    def phase_intervals(self) -> dict[str, list[Interval]]:
        by_phase: dict[str, list[Interval]] = defaultdict(list)
        for action, intervals in self.intervals.items():
            phase = phase_of_action(action)
            if phase is not None:
                by_phase[phase].extend(intervals)
        return by_phase


class PhaseClock(L.Callback):
    """Marks the edges no profiler action covers and keeps per-batch records for jitter:
    training loop bounds, validation windows, the end of warm-up, and, on CUDA, a pair of events
    per training step (recorded without synchronizing; read once at the end)."""

    def __init__(self, warmup_steps: int = 2, device_events: bool = True) -> None:
        self.warmup_steps = warmup_steps
        self.device_events = device_events
        self.marks: dict[str, float] = {}
        self.validation: list[Interval] = []
        self.validation_images: list[int] = []  # per validation run
        # training paused for validation and the checkpoint saved after it: from validation start
        # to the next training batch (profiler-free, so throughput is the same with measurement off)
        self.pauses: list[Interval] = []
        self._pause_start: float | None = None
        self.steps = self.images = self.warmup_images = 0
        self._validation_start: float | None = None
        self._events: list[tuple[Any, Any]] = []
        # per training step, batch start to the first backward: the host time a rank takes before
        # it joins the gradient all-reduce (with data_wait, what a DDP straggler makes others wait for)
        self.forward_s: list[float] = []
        self._batch_start: float | None = None

    def mark(self, name: str) -> float:
        self.marks[name] = now = time.perf_counter()
        return now

    def on_train_start(self, trainer, pl_module) -> None:
        self.mark("train_start")
        if self.warmup_steps == 0:
            self.marks["warmup_end"] = self.marks["train_start"]

    def _end_pause(self, now: float | None = None) -> None:
        if self._pause_start is not None:
            self.pauses.append((self._pause_start, time.perf_counter() if now is None else now))
            self._pause_start = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()
        self._end_pause(self._batch_start)
        if self.device_events and trainer.strategy.root_device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._events.append((start, None))

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self._batch_start is not None:  # training only, once per step
            self.forward_s.append(time.perf_counter() - self._batch_start)
            self._batch_start = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._batch_start = None
        if self._events and self._events[-1][1] is None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events[-1] = (self._events[-1][0], end)
        self.steps += 1
        self.images += len(batch[0])
        if self.steps == self.warmup_steps:
            self.warmup_images = self.images
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()  # once: warm-up (compilation) ends when its work is done
            self.mark("warmup_end")

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_start = time.perf_counter()
        if trainer.state.fn == "fit" and "train_start" in self.marks:
            self._pause_start = self._validation_start
        self.validation_images.append(0)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0):
        self.validation_images[-1] += len(batch[0])

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validation_start is not None:
            self.validation.append((self._validation_start, time.perf_counter()))
            self._validation_start = None

    def on_train_end(self, trainer, pl_module) -> None:
        self._end_pause()
        self.mark("train_end")

    def device_step_times(self) -> list[float]:
        """Seconds of device time per training step (CUDA only); synchronizes once."""
        if not self._events:
            return []
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1000.0 for start, end in self._events if end is not None]


@dataclass
class PhaseTable:
    wall_s: float
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    windows: dict[str, list[Interval]] = field(default_factory=dict)

    @property
    def accounted_s(self) -> float:
        return sum(p["wall_s"] for p in self.phases.values())

    @property
    def accounted_fraction(self) -> float:
        return self.accounted_s / self.wall_s if self.wall_s > 0 else 0.0


def account_phases(
    intervals: dict[str, list[Interval]], run: Interval, calls: dict[str, int] | None = None
) -> PhaseTable:
    """Lay every phase's intervals on one timeline within `run`; an instant covered by several
    phases goes to the one listed first in PHASES. Returns wall seconds, share of the run and
    call counts per phase, and the exclusive windows each phase got (for resource statistics)."""
    run_start, run_end = run
    edges: list[tuple[float, int, int]] = []  # (time, +1/-1, phase rank)
    for phase, spans in intervals.items():
        rank = PHASES.index(phase)
        for start, end in spans:
            start, end = max(start, run_start), min(end, run_end)
            if end > start:
                edges.append((start, 1, rank))
                edges.append((end, -1, rank))
    edges.sort()
    active = [0] * len(PHASES)
    windows: dict[str, list[Interval]] = defaultdict(list)
    previous = None
    for t, delta, rank in edges:
        if previous is not None and t > previous:
            owner = next((r for r, n in enumerate(active) if n > 0), None)
            if owner is not None:
                spans = windows[PHASES[owner]]
                if spans and spans[-1][1] == previous:
                    spans[-1] = (spans[-1][0], t)  # extend the open span
                else:
                    spans.append((previous, t))
        active[rank] += delta
        previous = t
    wall = run_end - run_start
    table = PhaseTable(wall_s=wall, windows=dict(windows))
    for phase in PHASES:
        spans = windows.get(phase, [])
        if not spans and phase not in intervals:
            continue
        seconds = sum(end - start for start, end in spans)
        table.phases[phase] = {
            "calls": (calls or {}).get(phase, len(intervals.get(phase, []))),
            "wall_s": seconds,
            "fraction": seconds / wall if wall > 0 else 0.0,
        }
    return table


def steady_state_batches(profiler: PhaseProfiler, warmup_steps: int) -> dict[str, list[float]]:
    """Per-batch data_wait and train_step seconds after warm-up, in batch order (for jitter).
    Lightning fetches once per training batch, so the i-th fetch belongs to the i-th step."""
    waits = profiler.intervals.get("[_TrainingEpochLoop].train_dataloader_next", [])
    steps = profiler.intervals.get("run_training_batch", [])
    n = min(len(waits), len(steps))
    return {
        "data_wait": [end - start for start, end in waits[warmup_steps:n]],
        "train_step": [end - start for start, end in steps[warmup_steps:n]],
    }
