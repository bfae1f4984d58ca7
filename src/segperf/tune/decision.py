"""The one place the tuner decides "faster beyond noise": a candidate's images/s against the best's,
with the run-to-run noise of every configuration the tune measured.

It is the report's rule (segperf.report.stats.compare_throughput, docs/STATISTICS.md): log
images/s, each side's noise its own spread shrunk toward the noise pooled over every
configuration with two or more usable runs (`groups`), a t interval with the pool's degrees of
freedom. The tuner adds one thing: a side with one run is decided too, its noise the pool's (a
tune measures many configurations on one machine within minutes, so their repeats say how much
one run scatters here, and a clear difference needs no second run of the candidate, where
Welch's test on two runs a side has about one degree of freedom). With fewer than MIN_POOLED_DF
degrees of freedom in the pool it decides as the report does on the two sides alone (two runs a
side or no decision).
"""

from __future__ import annotations

from collections.abc import Sequence

from segperf.report.stats import Comparison, compare_throughput, pooled_noise

MIN_POOLED_DF = 3  # a pool thinner than this says little about the noise: decide on the two sides alone


def compare(
    candidate: Sequence[float], against: Sequence[float], level: float, groups: Sequence[Sequence[float]] = ()
) -> Comparison:
    """`candidate` against `against` as a ratio of geometric means with its interval at `level`,
    the noise pooled over `groups` (the sides' own runs among them); see the module docstring."""
    xs = [v for v in candidate if v is not None and v > 0]
    ys = [v for v in against if v is not None and v > 0]
    noise = pooled_noise(groups)
    if noise is None or noise.df < MIN_POOLED_DF:
        return compare_throughput(xs, ys, level=level)
    return compare_throughput(xs, ys, noise=noise, level=level, min_runs=1)
