"""The one place the tuner decides "faster beyond noise": a candidate's images/s against the best's,
with the run-to-run noise of every configuration the tune measured.

A tune measures many configurations on one machine within minutes, so their repeats say how much
one configuration's runs scatter here; a comparison that borrows that noise can decide a clear
difference with one run of the candidate, where Welch's test on its own two sides needs two and
more a side (and with two, has about one degree of freedom). Here: the variance of log images/s
pooled over every configuration with two or more usable runs (`groups`), a t interval on the
difference of mean logs with the pooled degrees of freedom. With fewer than MIN_POOLED_DF degrees
of freedom in the pool it falls back on segperf.report.stats.compare_throughput, the report's rule.

Kept in this one function so that the report's pooled-noise rule (segperf.report.stats) replaces
its body when that lands: the tuner then decides as the report states.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from segperf.report.stats import Comparison, compare_throughput, t_critical

MIN_POOLED_DF = 3  # a pool thinner than this says little about the noise: decide on the two sides alone


def pooled_log_variance(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The variance of log images/s pooled over `groups` (each one configuration's runs) and its
    degrees of freedom; groups with fewer than two positive runs add nothing."""
    squares, df = 0.0, 0
    for group in groups:
        logs = [math.log(v) for v in group if v is not None and v > 0]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    return (squares / df if df else 0.0), df


def compare(
    candidate: Sequence[float], against: Sequence[float], level: float, groups: Sequence[Sequence[float]] = ()
) -> Comparison:
    """`candidate` against `against` as a ratio of geometric means with its interval at `level`,
    the noise pooled over `groups` (the sides' own runs among them); see the module docstring."""
    xs = [v for v in candidate if v is not None and v > 0]
    ys = [v for v in against if v is not None and v > 0]
    variance, df = pooled_log_variance(groups)
    if df < MIN_POOLED_DF or not xs or not ys:
        return compare_throughput(xs, ys, level=level)
    difference = statistics.fmean(math.log(v) for v in xs) - statistics.fmean(math.log(v) for v in ys)
    half = t_critical(level, df) * math.sqrt(variance * (1 / len(xs) + 1 / len(ys)))
    low, high = difference - half, difference + half
    return Comparison(len(xs), len(ys), math.exp(difference), math.exp(low), math.exp(high), level, low > 0 or high < 0)
