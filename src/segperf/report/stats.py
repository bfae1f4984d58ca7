"""The description of a sweep's repeats: what one configuration measured.

Repeats of one configuration (seeds, `repeat=`) scatter by run-to-run noise, so a quantity is
summarized two ways: as a median with its [min, max] range (`Stat`, the report's main tables),
and, as hyperfine does, as mean ± sample standard deviation (`Spread`), with ratios whose
uncertainty is propagated. Whether two throughputs differ beyond that noise is not decided here:
that is segperf.perf.decision, the one rule the report, the tuner and `segperf.compare` share. A
missing value (a failed or unmeasured repeat) is left out, never counted as zero.

Pure functions of lists of numbers: nothing here knows about runs, files or tables.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from segperf.perf.decision import present_numbers


@dataclass(frozen=True)
class Stat:
    """Median and range over repeats; `n` counts the values that were present (None skipped)."""

    n: int
    median: float | None
    min: float | None
    max: float | None


@dataclass(frozen=True)
class Spread:
    """Mean ± sample standard deviation and range over repeats, as hyperfine reports a benchmark
    ("mean ± σ", "min … max"); `std` is None with fewer than two values."""

    n: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None


def summarize(values: Any) -> Stat:
    """Median/min/max of the numbers among `values` (see present_numbers)."""
    nums = present_numbers(values)
    if not nums:
        return Stat(0, None, None, None)
    return Stat(len(nums), statistics.median(nums), min(nums), max(nums))


def spread(values: Any) -> Spread:
    """Mean, sample standard deviation (n - 1) and range of the numbers among `values`."""
    nums = present_numbers(values)
    if not nums:
        return Spread(0, None, None, None, None)
    std = statistics.stdev(nums) if len(nums) > 1 else None
    return Spread(len(nums), statistics.fmean(nums), std, min(nums), max(nums))


def median_ratio(a: Stat, b: Stat) -> float | None:
    """`a.median / b.median`, the report's speed-up; None when a median is missing or b's is 0."""
    if a.median is None or not b.median:
        return None
    return a.median / b.median


def speedup(a: Spread, b: Spread) -> tuple[float, float | None] | None:
    """`a.mean / b.mean` with its standard deviation, as hyperfine's "2.68 ± 0.04 times faster":
    first-order error propagation of independent means, r * sqrt((σa/a)² + (σb/b)²). The σ is
    None when either side has a single run (no spread to propagate); None when a mean is missing."""
    if a.mean is None or not b.mean:
        return None
    ratio = a.mean / b.mean
    if a.std is None or b.std is None or not a.mean:
        return ratio, None
    return ratio, abs(ratio) * ((a.std / a.mean) ** 2 + (b.std / b.mean) ** 2) ** 0.5
