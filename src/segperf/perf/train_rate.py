"""results.json's `train` section: how many samples the run trained on and at what rate.

Pure arithmetic on the PhaseClock's counts and marks (segperf.callbacks.phase_clock), so that the
rate is the same with the measurement on or off (`perf.measure=false` keeps only the clock).

The rate is of the steady state. A DataLoader with workers starts with its queue full (workers x
prefetch_factor batches, made while the run set up), so after warm-up the first steps take their
batches at the net's speed even where the loader is slower; only once the queue has drained does
each step wait for its batch. With the loader at half the net's speed, 2 workers x 4 batches would
serve the first 16 steps after warm-up at the net's speed, and a short run would time the net, not
the loader. So the rate starts at the first step after warm-up that waited for its batch (starved,
as segperf.perf.jitter counts it, from the gap between one step's end and the next one's start,
validation pauses left out), where one did within the first half of the timed steps; a run that
did not (compute-bound, its queue always full, or one late stall) is timed from the end of warm-up,
as before. Why by hand: Lightning's ThroughputMonitor times every step it is given.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from segperf.perf.jitter import STARVED_FRACTION

# steps the steady state must keep for its rate to be read from them rather than from the warm-up's end
MIN_STEADY_STEPS = 3


def steady_start(
    steps: Sequence[tuple[float, float]],
    pauses: Sequence[tuple[float, float]],
    warmup_steps: int,
    train_start: float,
    limit: int | None = None,
) -> int | None:
    """The index of the first step after warm-up that waited for its batch longer than
    STARVED_FRACTION of the median step, within the first half of the timed steps (a later stall
    is not a queue draining: it would throw most of a run away), None when none did or fewer than
    MIN_STEADY_STEPS steps are left from it (see the module docstring). The gap before a step is the time since the
    previous step ended (the first: since training started), less the validation pauses in between. `limit`:
    look no further than this position (a long run's held steps are its first ones and its last ones)."""
    timed = [end - start for start, end in steps[warmup_steps:]]
    if len(timed) < MIN_STEADY_STEPS:
        return None
    threshold = STARVED_FRACTION * statistics.median(timed)
    last = min(warmup_steps + len(timed) // 2, len(steps) - MIN_STEADY_STEPS)
    if limit is not None:
        last = min(last, limit - 1)
    for i in range(warmup_steps, last + 1):
        before, start = (steps[i - 1][1] if i else train_start), steps[i][0]
        paused = sum(max(0.0, min(e, start) - max(s, before)) for s, e in pauses)
        if start - before - paused > threshold:
            return i
    return None


def train_section(clock: Any, validation_s: float, run: tuple[float, float]) -> dict[str, Any]:
    """images/s after warm-up: images of the steps after warm-up over the training loop's time
    after warm-up, less the pauses for validation (and the checkpoint saved after it). `images` are
    samples: whatever the batch holds, counted by the clock's batch size."""
    start, end = clock.marks.get("train_start"), clock.marks.get("train_end", run[1])
    warm_end = clock.marks.get("warmup_end")
    section: dict[str, Any] = {
        "images": clock.images,
        "steps": clock.steps,
        "wall_s": None if start is None else end - start,
        "warmup_steps": clock.warmup_steps,
        "warmup_s": None if start is None or warm_end is None else warm_end - start,
        "validation_s": validation_s,
        "images_per_s": None,
        "warmup_excluded": False,
    }
    if start is None:
        return section
    # a long run holds its first steps and its last ones (segperf.perf.folding): look in the first
    head = getattr(clock, "step_limit", None)
    steady = steady_start(clock.step_times, clock.pauses, clock.warmup_steps, start, head)
    section["queue_steps_excluded"] = 0  # timed steps served by a queue filled before they ran
    if warm_end is not None and clock.steps > clock.warmup_steps:
        images, begin = clock.images - clock.warmup_images, warm_end
        section["warmup_excluded"] = True
        if steady is not None and steady > clock.warmup_steps:  # the loader's queue drained at `steady`
            images, begin = clock.images - sum(clock.step_images[:steady]), clock.step_times[steady - 1][1]
            section["queue_steps_excluded"] = steady - clock.warmup_steps
    else:  # too few steps to leave warm-up out: say so rather than report nothing
        images, begin = clock.images, start
    paused = sum(max(0.0, min(e, end) - max(s, begin)) for s, e in clock.pauses)
    seconds = end - begin - paused
    section["images_per_s"] = images / seconds if seconds > 0 else None
    val_s = [e - s for s, e in clock.validation]
    skip = 1 if len(val_s) > 1 else 0  # the first validation compiles/warms up the eval path
    if val_s and sum(val_s[skip:]) > 0:
        section["val_images_per_s"] = sum(clock.validation_images[skip : len(val_s)]) / sum(val_s[skip:])
    return section
