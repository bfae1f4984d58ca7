"""A long run's per-step record, kept in a size that does not grow with the run.

PerfMonitor keeps every step's timings (data wait, step, backward edges, the profiled actions) to
lay the phases on one timeline at the end. For a run of a million steps that is hundreds of MB in
memory and tens of MB of results.json. So, past the first `HEAD_STEPS` steps (kept exactly: the
warm-up, the DataLoader's start-up queue and the steady state's start are read from them), the
closed part of the timeline is *folded* every `CHUNK_STEPS` steps: its phase seconds and calls,
its train_step split, each rank's per-step parts and the per-step distributions are added to
running totals, and its intervals are dropped. At the end the totals and what is still held are
combined: the phase table, the split and the means are the same sums as without folding; the
distributions' count, mean, std, min and max are exact (Welford's algorithm, merged), their
quantiles come from a log-spaced histogram whose bins are 0.5% wide (so a p99 is within 0.25% of
the exact one), and a starved step is counted against the median those give.

Why by hand: torch's and Lightning's profilers keep every event (Lightning's SimpleProfiler a list
of durations per action, torch.profiler every op); none keeps a bounded summary of a timeline.
Nothing here imports Lightning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from segperf.perf.jitter import STARVED_FRACTION

# the first steps, kept exactly; then a fold every CHUNK_STEPS steps
HEAD_STEPS = 1024
CHUNK_STEPS = 4096
# the histogram: bins from 0.1 us to ~28 hours, each 0.5% wider than the one before
_LOW, _RATIO = 1e-7, 1.005
_BINS = int(math.log(1e5 / _LOW) / math.log(_RATIO)) + 2


class LogHistogram:
    """Counts of non-negative values (seconds) in log-spaced bins, with the exact count, sum, sum
    of squares about the mean (Welford, merged chunk by chunk), minimum and maximum."""

    def __init__(self) -> None:
        self.counts = np.zeros(_BINS, dtype=np.int64)
        self.n, self.mean, self.m2 = 0, 0.0, 0.0
        self.low, self.high = math.inf, -math.inf

    def add(self, values: Sequence[float]) -> None:
        array = np.asarray(values, dtype=float).ravel()
        if array.size == 0:
            return
        np.add.at(self.counts, _bin_of(array), 1)
        n, mean = array.size, float(array.mean())
        m2 = float(((array - mean) ** 2).sum())
        total = self.n + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.n * n / total
        self.mean += delta * n / total
        self.n = total
        self.low, self.high = min(self.low, float(array.min())), max(self.high, float(array.max()))

    def quantile(self, q: float) -> float | None:
        """The q-quantile as np.percentile's linear rule places it, read at its bin's middle."""
        if self.n == 0:
            return None
        rank = q * (self.n - 1)
        index = int(np.searchsorted(np.cumsum(self.counts), math.floor(rank) + 1))
        return min(max(_bin_middle(index), self.low), self.high)

    def count_above(self, threshold: float) -> int:
        """Values above `threshold` (bins wholly above it; the bin holding it counts by its middle)."""
        index = int(_bin_of(np.asarray([threshold]))[0])
        above = int(self.counts[index + 1 :].sum())
        return above + (int(self.counts[index]) if _bin_middle(index) > threshold else 0)


def _bin_of(array: np.ndarray) -> np.ndarray:
    safe = np.maximum(array, _LOW)
    return np.clip((np.log(safe / _LOW) / math.log(_RATIO)).astype(np.int64) + 1, 0, _BINS - 1) * (array > 0)


def _bin_middle(index: int) -> float:
    if index == 0:
        return 0.0
    return _LOW * _RATIO ** (index - 1) * math.sqrt(_RATIO)


def distribution_of(histogram: LogHistogram, exact: Sequence[float]) -> dict[str, Any]:
    """segperf.perf.jitter.distribution's figures of the folded values and the ones still held."""
    merged = LogHistogram()
    merged.counts += histogram.counts
    merged.n, merged.mean, merged.m2 = histogram.n, histogram.mean, histogram.m2
    merged.low, merged.high = histogram.low, histogram.high
    merged.add(exact)
    if merged.n == 0:
        return {key: (0 if key == "count" else None) for key in _KEYS}
    std = math.sqrt(max(merged.m2, 0.0) / merged.n)
    return {
        "count": merged.n,
        "mean": merged.mean,
        "p50": merged.quantile(0.5),
        "p90": merged.quantile(0.9),
        "p99": merged.quantile(0.99),
        "max": merged.high,
        "min": merged.low,
        "std": std,
        "cv": std / merged.mean if merged.mean else None,
        "folded": histogram.n,  # of them, read from the histogram for the quantiles
    }


_KEYS = ("count", "mean", "p50", "p90", "p99", "max", "min", "std", "cv")


class Folded:
    """What the folded part of a run added up to (see the module doc)."""

    def __init__(self) -> None:
        self.steps = 0  # training steps folded
        self.until: float | None = None  # the timeline is folded up to here
        self.phase_s: dict[str, float] = {}
        self.phase_calls: dict[str, int] = {}
        self.wait, self.step = LogHistogram(), LogHistogram()  # steady-state data wait, train step
        self.device_step = LogHistogram()
        self.split_s = {"forward": 0.0, "backward": 0.0, "optimizer_step": 0.0}
        self.split_steps, self.unsplit_s = 0, 0.0
        self.device_split_s: dict[str, float] = {}
        # per-step parts of a rank's arrival at the all-reduce: (sum, count)
        self.parts: dict[str, list[float]] = {}

    def add_phases(self, phases: dict[str, dict[str, Any]], calls: dict[str, int]) -> None:
        for phase, row in phases.items():
            self.phase_s[phase] = self.phase_s.get(phase, 0.0) + row["wall_s"]
        for phase, count in calls.items():
            self.phase_calls[phase] = self.phase_calls.get(phase, 0) + count

    def add_split(self, split: dict[str, Any]) -> None:
        for part, seconds in split["seconds"].items():
            self.split_s[part] += seconds
        self.split_steps += split["steps"]
        self.unsplit_s += split["unsplit_s"]

    def add_part(self, name: str, values: Sequence[float]) -> None:
        total = self.parts.setdefault(name, [0.0, 0])
        total[0] += float(sum(values))
        total[1] += len(values)

    def starved(self, waits: Sequence[float], steps: Sequence[float]) -> dict[str, Any]:
        """segperf.perf.jitter.starved_steps over the folded steps and the ones still held."""
        total = self.step.n + len(steps)
        if total == 0:
            return {"count": 0, "steps": 0, "fraction": None, "threshold_s": None}
        median = distribution_of(self.step, steps)["p50"]
        threshold = STARVED_FRACTION * median
        count = self.wait.count_above(threshold) + int(np.count_nonzero(np.asarray(waits, dtype=float) > threshold))
        return {"count": count, "steps": total, "fraction": count / total, "threshold_s": threshold}
