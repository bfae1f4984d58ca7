"""SteadyProbe: a tuner's probe times its steady state and runs until its rate is known.

The tuner adds this callback to each speed probe's job (`+callbacks.tune_probe=...`,
segperf.tune.runner). After every training step it reads the steps so far the way
segperf.perf.steady_state does: the warm-up as long as the step times say (at least
`warmup_steps`: compilation, the allocator, caches), then the batches the DataLoader queued before
the timed steps began (`workers x prefetch_factor`, a background thread's depth without workers)
left out, and the rate of the steps after those with its relative half-width at `level`. It stops
the fit as soon as at least `min_steps` steps are timed, the times have settled and the half-width
is at most `precision` ("precision"), or when `max_steps` are timed without that ("cap": the rate
is then as precise as the record says). The run ends like a finished one, and results.json's
`tune_probe` says what was left out and why, how many steps were timed, the rate, its precision and
what stopped the run (None: something else did, the run's size or its time limit).

Why by hand: Lightning's ThroughputMonitor and EarlyStopping neither find a warm-up's end nor
know the loader's queue; the rate has to be read from the training steps themselves. The clock is
the host's (no synchronization is added; on a GPU the host runs ahead by a step or two, which a
window of many steps absorbs). The window here is the tuner's; results.json's `train.images_per_s`
(PerfMonitor's) keeps its own, fixed warm-up.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from segperf.callbacks.batch_size import BatchSizeFn, batch_size
from segperf.perf.steady_state import SteadyWindow, steady_window

SECTION = "tune_probe"  # results.json's key

# DataLoader's prefetch_factor=None means 2 batches a worker where it has workers
TORCH_DEFAULT_PREFETCH = 2


def queued_batches(loader: Any) -> tuple[int, str]:
    """How many batches `loader` keeps in flight before a step asks for one, and why: workers x
    prefetch_factor for a DataLoader with workers, plus a background thread's `depth` (segperf's
    prefetch without workers) in any wrapper around it; wrappers are unwrapped through `.loader`."""
    total, why = 0, []
    for _ in range(8):  # wrappers in wrappers, not a cycle
        if isinstance(loader, (list, tuple)) and loader:
            loader = loader[0]
        elif isinstance(loader, dict) and loader:
            loader = next(iter(loader.values()))
        depth = vars(loader).get("depth") if hasattr(loader, "__dict__") else None
        if isinstance(depth, int) and depth > 0:
            total += depth
            why.append(f"a prefetching thread's {depth}")
        if isinstance(loader, DataLoader):
            if loader.num_workers:
                factor = loader.prefetch_factor or TORCH_DEFAULT_PREFETCH
                total += loader.num_workers * factor
                why.append(f"{loader.num_workers} workers x prefetch_factor {factor}")
            break
        inner = vars(loader).get("loader") if hasattr(loader, "__dict__") else None
        if inner is None:
            break
        loader = inner
    return total, " + ".join(why) or "no workers, no prefetching"


class SteadyProbe(L.Callback):
    clock = staticmethod(time.perf_counter)  # the host's clock (tests set a fake one)

    def __init__(
        self,
        warmup_steps: int = 2,
        min_steps: int = 8,
        max_steps: int = 32,
        precision: float = 0.05,
        level: float = 0.95,
        queued_batches: int | None = None,
        batch_size_fn: BatchSizeFn | None = None,
    ) -> None:
        """
        Args:
            warmup_steps: the fewest steps left out as warm-up (the step times may add more).
            min_steps: the fewest timed steps a rate is read from.
            max_steps: the most timed steps: the probe stops there, precise or not.
            precision: stop once the rate's relative half-width at `level` is at most this.
            queued_batches: the loader's queue in batches; None reads it from the trainer's loader.
        """
        if warmup_steps < 0 or min_steps < 2 or max_steps < min_steps or not 0 < precision < 1:
            raise ValueError(
                f"SteadyProbe(warmup_steps={warmup_steps}, min_steps={min_steps}, max_steps={max_steps}, "
                f"precision={precision}): warmup_steps >= 0, 2 <= min_steps <= max_steps, 0 < precision < 1"
            )
        self.warmup_steps, self.min_steps, self.max_steps = warmup_steps, min_steps, max_steps
        self.precision, self.level = float(precision), float(level)
        self.queued, self.queue_reason = queued_batches, "given"
        self.batch_size = batch_size_fn or batch_size
        self.steps: list[tuple[float, float]] = []
        self.images: list[int] = []
        self.pauses: list[tuple[float, float]] = []
        self.train_start: float | None = None
        self.window: SteadyWindow | None = None
        self.stopped_by: str | None = None
        self._batch_start: float | None = None
        self._validation_start: float | None = None

    def extend_warmup(self, steps: int) -> None:
        """`steps` more warm-up steps, asked for before the first step ends (segperf.callbacks.share_cores)."""
        if self.steps:
            raise RuntimeError("SteadyProbe.extend_warmup: the warm-up is counted from the first step; ask before it")
        self.warmup_steps += steps

    def on_train_start(self, trainer, pl_module) -> None:
        if self.queued is None:
            self.queued, self.queue_reason = queued_batches(trainer.train_dataloader)
        self.train_start = self.clock()

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        self._batch_start = self.clock()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        end = self.clock()
        self.steps.append((self._batch_start if self._batch_start is not None else end, end))
        self.images.append(self.batch_size(batch))
        if len(self.steps) < self.warmup_steps + self.min_steps or self.stopped_by is not None:
            return
        window = self._read()
        if window.timed_steps >= self.min_steps and window.settled and (window.half_width or 1.0) <= self.precision:
            self.stopped_by = "precision"
        elif window.timed_steps >= self.max_steps:
            self.stopped_by = "cap"
        if self.stopped_by is not None:
            trainer.should_stop = True  # Lightning ends the epoch loop after this step

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.train_start is not None:
            self._validation_start = self.clock()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validation_start is not None:
            self.pauses.append((self._validation_start, self.clock()))
            self._validation_start = None

    def _read(self) -> SteadyWindow:
        self.window = steady_window(
            self.steps,
            self.images,
            min_warmup=self.warmup_steps,
            queued_batches=self.queued or 0,
            train_start=self.train_start if self.train_start is not None else self.steps[0][0],
            pauses=self.pauses,
            level=self.level,
        )
        return self.window

    def record(self, results: dict[str, Any]) -> None:
        """results.json `tune_probe`: what was left out and why, the rate and its precision, what stopped it."""
        window = self._read() if self.steps else None
        section: dict[str, Any] = {
            "min_warmup_steps": self.warmup_steps,
            "min_steps": self.min_steps,
            "max_steps": self.max_steps,
            "precision": self.precision,
            "queue": self.queue_reason,
            "stopped_by": self.stopped_by,
        }
        if window is not None:
            section |= window.to_dict()
            section["excluded"] = excluded(window, self.warmup_steps, self.queue_reason)
        results[SECTION] = section


def excluded(window: SteadyWindow, min_warmup: int, queue_reason: str) -> list[str]:
    """What the window left out and why, one line each, as results.json says it."""
    lines = []
    if window.warmup_steps:
        lines.append(f"{min(min_warmup, window.steps)} warm-up steps (the minimum: compilation, caches)")
    if window.warmup_by_times:
        lines.append(f"{window.warmup_by_times} more warm-up steps: their times had not settled to the steady level")
    if not window.settled:
        lines.append("the step times had not settled within the first half of the run: the rate may still be falling")
    if window.queue_steps:
        lines.append(
            f"{window.queue_steps} steps served from the loader's queue ({queue_reason}: {window.queued_batches} "
            "batches) before it drained"
        )
    return lines
