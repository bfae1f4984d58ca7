"""The steady state of a short run, read from its step times: where the warm-up ended, which steps
a DataLoader served from the queue it filled before they ran, and how precisely the steps after
them give the rate.

A tuner's probe is a short run, and its first steps are not the run's speed:

- **Warm-up** (torch.compile's first steps, the allocator growing its pools, caches filling,
  recompiles on a new shape) ends when the step times say so, not after a fixed count: from the
  configured minimum on, it lasts until SETTLED_RUN steps in a row take no more than
  SETTLE_TOLERANCE (or three robust deviations of the later steps from one step to the next,
  where those are noisier) above
  the steady level, the median of the later half of the steps. It is looked for in the first half
  of the steps after the minimum; a run whose times still fall there is `settled=False`.
- **The loader's queue.** A DataLoader with workers fills `workers x prefetch_factor` batches while
  the run sets up and warms up (a background thread's `depth` without workers): the first that
  many steps after warm-up take their batches at the net's speed even where the loader is slower.
  They are not timed; nor are the later ones before the first step that waited for its batch,
  where one did in the first half (segperf.perf.train_rate.steady_start: a loader at half the
  net's speed drains a queue of 8 over 16 steps, not 8).
- **Precision.** The rate is the images of the steps after those over their time; its relative
  half-width at `level` comes from BLOCKS batch means of consecutive steps (workers hand out
  batches in turns, so one step's time is not independent of the next; the means of runs of steps
  are), Student's t with BLOCKS - 1 degrees of freedom.

Pure arithmetic on (start, end) times of each step: the tuner's probe callback
(segperf.callbacks.steady_probe) calls it after every step to decide when to stop, and its tests
hand it synthetic sequences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from segperf.perf.train_rate import steady_start

# a step more than this above the steady level (relative) is still warming up; a run whose later
# steps scatter more than this widens it to three of their robust standard deviations
SETTLE_TOLERANCE = 0.2
# the warm-up ends at the first step from which this many in a row are within the tolerance: one
# fast step between two compiles (a recompile on the backward's first call) does not end it
SETTLED_RUN = 3
# the precision comes from this many batch means of consecutive timed steps (fewer steps: one each)
BLOCKS = 8
# 1.4826 x the median absolute deviation estimates a normal standard deviation
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class SteadyWindow:
    """Which steps of a run time its steady state, and what they give."""

    steps: int  # the steps the run took
    warmup_steps: int  # left out as warm-up: the configured minimum and those the step times added
    warmup_by_times: int  # of them, the steps the times added beyond the minimum
    settled: bool  # the step times settled within the first half after the minimum
    queue_steps: int  # after warm-up, served from the loader's queue (and until it drained): not timed
    queued_batches: int  # the batches the loader keeps in flight (workers x prefetch_factor)
    start: int  # the first timed step (0-based)
    timed_steps: int
    images_per_s: float | None
    half_width: float | None  # relative half-width of images_per_s's interval at `level`
    level: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_periods(
    steps: Sequence[tuple[float, float]], pauses: Sequence[tuple[float, float]], train_start: float
) -> list[float]:
    """Each step's share of the run's time: from the previous step's end (the first: from the start
    of training) to its own end, its wait for the batch included, less the pauses (validation) in
    between."""
    periods, before = [], train_start
    for _, end in steps:
        paused = sum(max(0.0, min(e, end) - max(s, before)) for s, e in pauses)
        periods.append(end - before - paused)
        before = end
    return periods


def settled_from(periods: Sequence[float], min_warmup: int) -> tuple[int, bool]:
    """The first step of the steady state (at least `min_warmup`) and whether the times settled;
    see the module docstring. Too few steps after the minimum to tell: (min_warmup, False)."""
    after = list(periods[min_warmup:])
    if len(after) < 2 * SETTLED_RUN:
        return min_warmup, False
    later = after[len(after) // 2 :]
    level = statistics.median(later)
    if level <= 0:
        return min_warmup, False
    # the later steps' own scatter, from one step to the next: a trend there (times still falling)
    # does not widen the tolerance as deviations from their median would
    steps_apart = [abs(b - a) for a, b in zip(later, later[1:], strict=False)]
    spread = MAD_TO_SD * statistics.median(steps_apart) / math.sqrt(2) / level
    ceiling = level * (1 + max(SETTLE_TOLERANCE, 3 * spread))
    for i in range(len(after) // 2 + 1):
        run = after[i : i + SETTLED_RUN]
        if len(run) == SETTLED_RUN and all(p <= ceiling for p in run):
            return min_warmup + i, True
    return min_warmup + len(after) // 2, False


def relative_half_width(periods: Sequence[float], images: Sequence[int], level: float) -> float | None:
    """The relative half-width at `level` of the rate of these steps, from up to BLOCKS batch means
    of consecutive steps (the first steps left over from equal blocks are left out of the spread,
    not of the rate); None with fewer than two steps."""
    count = len(periods)
    blocks = min(BLOCKS, count)
    if blocks < 2:
        return None
    size = count // blocks
    first = count - blocks * size
    rates = []
    for b in range(blocks):
        lo, hi = first + b * size, first + (b + 1) * size
        seconds = sum(periods[lo:hi])
        if seconds <= 0:
            return None
        rates.append(sum(images[lo:hi]) / seconds)
    mean = statistics.fmean(rates)
    if mean <= 0:
        return None
    from scipy.stats import t as student_t  # here: scipy.stats takes 0.7 s to import on 2 cores

    t = float(student_t.isf((1.0 - level) / 2.0, blocks - 1))
    return t * statistics.stdev(rates) / mean / math.sqrt(blocks)


def steady_window(
    steps: Sequence[tuple[float, float]],
    images: Sequence[int],
    *,
    min_warmup: int,
    queued_batches: int,
    train_start: float,
    pauses: Sequence[tuple[float, float]] = (),
    level: float = 0.95,
) -> SteadyWindow:
    """The steady state of a run from each step's (start, end) and images (module docstring)."""
    periods = step_periods(steps, pauses, train_start)
    warm_end, settled = settled_from(periods, min_warmup)
    warm_end = min(warm_end, len(steps))
    start = min(warm_end + max(0, queued_batches), len(steps))
    drained = steady_start(steps, pauses, warm_end, train_start) if warm_end < len(steps) else None
    if drained is not None and drained > start:  # the queue took longer to drain than its size
        start = drained
    timed = periods[start:]
    seconds = sum(timed)
    rate = sum(images[start:]) / seconds if timed and seconds > 0 else None
    return SteadyWindow(
        steps=len(steps),
        warmup_steps=warm_end,
        warmup_by_times=warm_end - min(min_warmup, len(steps)),
        settled=settled,
        queue_steps=start - warm_end,
        queued_batches=max(0, queued_batches),
        start=start,
        timed_steps=len(timed),
        images_per_s=rate,
        half_width=relative_half_width(timed, images[start:], level),
        level=level,
    )
