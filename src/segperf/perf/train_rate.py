"""results.json's `train` section: how many samples the run trained on and at what rate.

Pure arithmetic on the PhaseClock's counts and marks (segperf.callbacks.phase_clock), so that the
rate is the same with the measurement on or off (`perf.measure=false` keeps only the clock).
"""

from __future__ import annotations

from typing import Any


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
    if warm_end is not None and clock.steps > clock.warmup_steps:
        images, begin = clock.images - clock.warmup_images, warm_end
        section["warmup_excluded"] = True
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
