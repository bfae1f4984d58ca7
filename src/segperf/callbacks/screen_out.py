"""Screening: a tuner's probe that is already far slower than the best after its first timed steps
stops there, instead of running its full size or until its time limit.

The tuner adds this callback to a probe's job (`+callbacks.tune_screen=...`, segperf.tune.runner)
with a floor of images/s (a fraction of the best's; tune.probe.screen_factor). After warm-up
(`warmup_steps`, the fewest steps segperf leaves out of images/s: compilation, caches) it reads
the images/s of the last `timed_steps` steps and stops the fit when that rate is below the floor,
once those steps have settled: within SETTLED_SPREAD of each other, or, where the steps alternate
(workers handing out batches in turns), the last `timed_steps` within it of the `timed_steps`
before them. A warm-up that outlasts the minimum (a compile of three steps: 3 s, then 0.4 s steps)
would otherwise read as a configuration far slower than it is; its times say when it has ended
(segperf.perf.steady_state). The run then ends like a finished one, its images/s of the steps it did,
and results.json says why it stopped (`tune_screen`), so the tuner records the probe as
"screened out" with its measured rate rather than as cut at a time limit.

Why not Lightning's EarlyStopping: it watches a logged metric at validation, and a probe validates
once, at its end; the rate has to be read from the training steps themselves. The clock is the
host's after each step: no synchronization is added (on a GPU the host runs ahead by a step or
two, which shifts a rate over several steps by a little, not by the factor screening looks for).
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from segperf.callbacks.batch_size import BatchSizeFn, batch_size

SECTION = "tune_screen"  # results.json's key for what the screen saw
# steps whose times are within this factor of each other have settled: a warm-up step (a compile's
# 3 s against 0.4) is far beyond it, a screened configuration's steady steps (~10% apart) well within
SETTLED_SPREAD = 1.5


class ScreenOut(L.Callback):
    """Stops the fit when the images/s of the steps after warm-up fall below `floor_images_per_s`
    (checked from the `timed_steps`-th timed step on). Samples are counted as PerfMonitor counts
    them: the leading dimension of the batch's first tensor (tensor, tuple or dict batches), or
    `batch_size_fn`."""

    def __init__(
        self,
        floor_images_per_s: float,
        timed_steps: int = 2,
        warmup_steps: int = 2,
        batch_size_fn: BatchSizeFn | None = None,
    ) -> None:
        if floor_images_per_s <= 0 or timed_steps < 1 or warmup_steps < 0:
            raise ValueError(
                f"ScreenOut(floor_images_per_s={floor_images_per_s}, timed_steps={timed_steps}, "
                f"warmup_steps={warmup_steps}): the floor must be > 0, timed_steps >= 1, warmup_steps >= 0"
            )
        self.floor, self.timed_steps, self.warmup_steps = float(floor_images_per_s), timed_steps, warmup_steps
        self.batch_size = batch_size_fn or batch_size
        self.steps = 0
        self.timed_from: float | None = None
        self.periods: list[float] = []  # each timed step's time, from the previous step's end
        self.images: list[int] = []
        self.rate: float | None = None
        self.screened_out = False

    def extend_warmup(self, steps: int) -> None:
        """`steps` more warm-up steps, asked for before the first step ends (segperf.callbacks.share_cores)."""
        if self.steps:
            raise RuntimeError("ScreenOut.extend_warmup: the warm-up is counted from the first step; ask before it")
        self.warmup_steps += steps
        self.timed_from = None

    def on_train_start(self, trainer, pl_module) -> None:
        if self.warmup_steps == 0:
            self.timed_from = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.timed_from = time.perf_counter()
            return
        if self.timed_from is None or self.steps < self.warmup_steps:
            return
        now = time.perf_counter()
        self.periods.append(now - self.timed_from)
        self.images.append(self.batch_size(batch))
        self.timed_from = now
        last = self.periods[-self.timed_steps :]
        if len(last) < self.timed_steps or sum(last) <= 0 or not self._settled():
            return
        self.rate = sum(self.images[-self.timed_steps :]) / sum(last)
        if self.rate < self.floor and not self.screened_out:
            self.screened_out = True
            trainer.should_stop = True  # Lightning ends the epoch loop after this step

    def _settled(self) -> bool:
        """The last `timed_steps` steps' times within SETTLED_SPREAD of each other, or their total
        within it of the `timed_steps` steps' before them (steps that alternate, taken in turns)."""
        k = self.timed_steps
        last = self.periods[-k:]
        if min(last) > 0 and max(last) <= SETTLED_SPREAD * min(last):
            return True
        if len(self.periods) < 2 * k:
            return False
        now, before = sum(last), sum(self.periods[-2 * k : -k])
        return min(now, before) > 0 and max(now, before) <= SETTLED_SPREAD * min(now, before)

    def record(self, results: dict[str, Any]) -> None:
        """results.json `tune_screen`: the floor, the rate it last read, and whether it stopped the run."""
        results[SECTION] = {
            "floor_images_per_s": self.floor,
            "timed_steps": self.steps - self.warmup_steps if self.steps > self.warmup_steps else 0,
            "images_per_s": self.rate,
            "screened_out": self.screened_out,
        }
