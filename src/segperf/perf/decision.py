"""The decision statistics of segperf: whether two sets of runs differ beyond run-to-run noise.

One home for the rule that the sweep report (segperf.report.decide), the CI gate (segperf.compare)
and the tuner (segperf.tune.search) all decide with, so that a speed-up the tuner keeps is one the
report and the gate would call the same way (docs/STATISTICS.md):

- `compare_throughput`: the ratio of geometric means of images/s with its t interval, each side's
  noise its own spread shrunk toward the noise pooled over a sweep (`pooled_noise`,
  `shrunk_variance`); `compare_pooled` is the tuner's form of it, deciding on one run of a side
  where the pool is deep enough;
- `later_interval` (with `busier_than_later`): where a later run puts a ratio, the interval the
  tuner prints;
- `welch`: Welch's t-test, for quality metrics, which are not ratios of rates.

Why here, in segperf.perf: the three commands that decide live in three packages (report, compare,
tune) and none of them should import another's to decide; perf is the Lightning-free measurement
maths every one of them may import, and this module imports nothing of segperf (the architecture
test keeps perf free of report, training and the callbacks). What a sweep's repeats *were* (median
and range, mean ± sigma) is the report's description of them: segperf.report.stats.

Pure functions of lists of numbers: nothing here knows about runs, files or tables. A missing value
(a failed or unmeasured repeat) is left out, never counted as zero.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def present_numbers(values: Any) -> list[float]:
    """The numbers among `values`: None, NaN and booleans (a missing or failed repeat) left out."""
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and v == v]


LEVEL = 0.95  # the confidence level of every "distinguishable" the report states
MIN_RUNS = 2  # completed runs needed on each side: one run has no spread to judge noise by


@dataclass(frozen=True)
class Welch:
    """Welch's two-sample t comparison of `a` against `b`: the difference of means, its two-sided
    confidence interval at `level`, and the decision, None when it cannot be made (fewer than
    MIN_RUNS values on a side)."""

    n_a: int
    n_b: int
    difference: float | None
    low: float | None
    high: float | None
    df: float | None
    level: float
    distinguishable: bool | None


@dataclass(frozen=True)
class Comparison:
    """`a` against `b` on a ratio scale (throughput): the ratio of geometric means with its
    confidence interval, and whether it is distinguishable from 1 (None: cannot be decided)."""

    n_a: int
    n_b: int
    ratio: float | None
    low: float | None
    high: float | None
    level: float
    distinguishable: bool | None
    log_se: float | None = None  # standard error of the difference of mean log images/s
    df: float | None = None  # degrees of freedom of its t interval (the pooled noise's)


def welch(a: Any, b: Any, level: float = LEVEL) -> Welch:
    """Welch's t-test of mean(a) - mean(b), two-sided at 1 - `level`.

    Why Welch: with two or three repeats per configuration, rank tests cannot reach the 5% level
    at all (Mann-Whitney's smallest two-sided p with 3 against 3 is 0.1), and a percentile
    bootstrap has so few distinct resamples (10 for 3 values) that its real false-positive rate
    is far above its nominal one. The t interval is exact for normal noise and, with the
    Welch-Satterthwaite degrees of freedom, does not assume the two sides are equally noisy (a
    configuration with workers is often noisier than one without). tests/test_stats.py measures
    its false-positive rate on simulated equal configurations. Identical repeats on both sides
    (no spread at all) decide by whether the means differ."""
    xs, ys = present_numbers(a), present_numbers(b)
    n_a, n_b = len(xs), len(ys)
    if n_a < MIN_RUNS or n_b < MIN_RUNS:
        return Welch(n_a, n_b, None, None, None, None, level, None)
    diff = statistics.fmean(xs) - statistics.fmean(ys)
    va, vb = statistics.variance(xs) / n_a, statistics.variance(ys) / n_b
    se = math.sqrt(va + vb)
    if se == 0 or not math.isfinite(se):
        return Welch(n_a, n_b, diff, diff, diff, None, level, diff != 0)
    df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    half = t_critical(level, df) * se
    low, high = diff - half, diff + half
    return Welch(n_a, n_b, diff, low, high, df, level, low > 0 or high < 0)


@dataclass(frozen=True)
class Noise:
    """Run-to-run noise of log throughput, pooled over the configurations of a sweep: `variance`
    of one run's log images/s about its configuration's mean (its square root is about the
    relative noise: 0.03 for 3%), with `df` degrees of freedom from `configurations`."""

    variance: float
    df: int
    configurations: int

    @property
    def relative(self) -> float:
        return math.sqrt(self.variance)


def _logs(values: Any) -> list[float] | None:
    """log of the numbers among `values`; None when one is not positive (no log of a zero rate)."""
    nums = present_numbers(values)
    return None if any(v <= 0 for v in nums) else [math.log(v) for v in nums]


def pooled_noise(groups: Any) -> Noise | None:
    """The noise of a sweep from every configuration's throughputs (`groups`: one list of values
    per configuration; one with fewer than MIN_RUNS values, or a non-positive one, adds nothing):
    the pooled variance of log values about each configuration's mean, each configuration
    weighted by its degrees of freedom (runs - 1). A slow outlier run or a noisier configuration
    raises it, which widens every interval (the safe direction: fewer calls, not false ones).
    None without any repeats."""
    per = [(len(logs) - 1, statistics.variance(logs)) for g in groups if (logs := _logs(g)) and len(logs) >= MIN_RUNS]
    if not per:
        return None
    df = sum(d for d, _ in per)
    return Noise(sum(d * v for d, v in per) / df, df, len(per))


def shrunk_variance(logs: list[float], noise: Noise) -> float:
    """One configuration's noise: its own variance of log values shrunk toward the sweep's, each
    weighted by its degrees of freedom ((pool df x pool variance + own df x own variance) / both
    dfs, as limma moderates a gene's variance). A configuration noisier than the rest keeps part
    of its own spread (it cannot hide behind a quiet pool); two runs alone (one df) cannot swing it."""
    own_df = len(logs) - 1
    if own_df < 1:  # one run has no spread of its own: the sweep's noise is all there is
        return noise.variance
    return (noise.df * noise.variance + own_df * statistics.variance(logs)) / (noise.df + own_df)


def compare_throughput(
    a: Any, b: Any, noise: Noise | None = None, level: float = LEVEL, min_runs: int = MIN_RUNS
) -> Comparison:
    """`a` against `b` (images/s of each run): the ratio of geometric means, its `level` interval and
    whether that excludes 1. The one decision rule of segperf: the report, report.json, the
    charts, the tuner and `segperf.compare` all call it.

    The rule, in words: speed-ups are ratios and run-to-run noise is proportional, so everything
    is done on log images/s. Each side's noise is its own spread shrunk toward the sweep's pooled
    noise (`shrunk_variance`; `noise` from `pooled_noise` over all the sweep's configurations,
    without it pooled over `a` and `b` alone). The interval is the difference of mean logs ±
    Student's t, with the pool's degrees of freedom, x its standard error, taken back to a ratio;
    distinguishable when it excludes 1. Why pool: with two runs a side, Welch's test has about one degree of
    freedom (t = 12.7), so a 2.7-3.4 against 8.4-8.5 images/s comparison came out "not
    distinguishable"; every configuration of a sweep ran on the same machine in the same hour and
    tells how much runs there wobble. tests/test_stats.py checks its rates on seeded simulated
    sweeps. Needs `min_runs` values a side (None otherwise): MIN_RUNS for the report; the tuner,
    which pools the noise of every configuration it measured, decides with one run of a side
    (`min_runs=1` with `noise`: that side's noise is the pool's). Identical repeats with no
    spread anywhere decide by whether the means differ."""
    xs, ys = present_numbers(a), present_numbers(b)
    log_a, log_b = _logs(xs), _logs(ys)
    if log_a is None or log_b is None:  # no log of a zero throughput: not decidable
        return Comparison(len(xs), len(ys), None, None, None, level, None)
    if noise is None:  # without a sweep's noise, each side's own spread is all there is
        min_runs = max(min_runs, MIN_RUNS)
    if len(xs) < min_runs or len(ys) < min_runs or not xs or not ys:
        ratio = xs[0] / ys[0] if len(xs) == 1 and len(ys) == 1 else None
        return Comparison(len(xs), len(ys), ratio, None, None, level, None)
    noise = noise or pooled_noise([xs, ys])
    diff = statistics.fmean(log_a) - statistics.fmean(log_b)
    se = math.sqrt(shrunk_variance(log_a, noise) / len(log_a) + shrunk_variance(log_b, noise) / len(log_b))
    if se == 0 or not math.isfinite(se):
        return Comparison(len(xs), len(ys), math.exp(diff), math.exp(diff), math.exp(diff), level, diff != 0, 0.0, None)
    half = t_critical(level, noise.df) * se
    low, high = diff - half, diff + half
    return Comparison(
        len(xs), len(ys), math.exp(diff), math.exp(low), math.exp(high), level, low > 0 or high < 0, se, noise.df
    )


def later_interval(versus: Comparison, later: float, within: float = 0.0) -> tuple[float | None, float | None]:
    """Where one later run of each side will put `versus`'s ratio, at `versus.level`: a prediction
    interval, not a confidence interval. `later` is how much one run's images/s scatters between
    runs made at other times on this machine (0.05 for 5%); `within` how much it scattered among
    the runs `versus` was measured from (their pooled noise, log scale: Noise.relative).

    Why: a tune's or a sweep's runs share their minutes, in which a shared machine drifts little, so
    their interval is of those minutes: a tune's probes scattered 2.3% within its 10 minutes and
    4.5-5.8% over the next hour, and its intervals held a later long run's ratio for 10 of 15
    decisions (docs/BENCHMARKS.md). The model: each configuration's speed moves from one period to
    the next by drift (variance d^2 = later^2 - within^2 on log images/s, none when the runs scattered
    as much as `later`) and each run scatters by `within` about that. The later ratio then differs
    from `versus`'s by the comparison's own error (log_se^2), by the drift of both sides in the
    runs' period (2 d^2: shared by all of their runs, so their interval cannot see it), and by one
    later run of each (2 later^2). A later run scatters at least as much as the runs just seen, so
    where they scattered more than `later` says (a busier machine than the figure was measured on)
    the later runs' part counts `within`. With `later` 0 it is `versus`'s own interval; (None, None)
    where `versus` has none. tests/test_stats.py checks its coverage on simulated drifting machines
    and on one noisier than `later`."""
    if versus.ratio is None or versus.low is None or versus.log_se is None:
        return None, None
    if later == 0:
        return versus.low, versus.high
    scatter = within if busier_than_later(later, within) else math.log1p(later)
    known = 2 * (scatter**2 - within**2) + 2 * scatter**2  # the drift and the later runs' part
    variance = versus.log_se**2 + known
    # Satterthwaite's degrees of freedom: `later` is given, not estimated from these runs, so only
    # log_se's share of the variance carries the pool's few degrees of freedom (with all of them on
    # the whole, a first comparison's t of 12.7 at one df would stretch the known part too)
    df = math.inf if not versus.df or versus.log_se == 0 else versus.df * (variance / versus.log_se**2) ** 2
    half = t_critical(versus.level, df) * math.sqrt(variance)
    center = math.log(versus.ratio)
    return math.exp(center - half), math.exp(center + half)


def busier_than_later(later: float, within: float) -> bool:
    """Whether the runs just seen scattered more (`within`, log scale) than the later-run noise
    `later` says: later_interval then counts a later run at their scatter."""
    return within > math.log1p(later)


@functools.lru_cache(maxsize=256)  # a sweep asks for one df over and over
def t_critical(level: float, df: float) -> float:
    """The two-sided critical value of Student's t: P(|T| > t) = 1 - level with `df` degrees of
    freedom (2.776 for 95% at df=4; 1.960 as df grows); Welch's df is fractional, so a printed
    table will not do. scipy.stats' inverse survival function (tests/test_stats.py holds it to the
    values the hand-written incomplete beta it replaced gave, to 1e-8, and every decision the same)."""
    from scipy.stats import t as student_t  # here: scipy.stats takes 0.7 s to import on 2 cores

    return float(student_t.isf((1.0 - level) / 2.0, df))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| > |t|) for Student's t with `df` degrees of freedom."""
    from scipy.stats import t as student_t

    return float(2.0 * student_t.sf(abs(t), df))


# the tuner's form of the rule: below this many degrees of freedom a pool says little about the
# noise, and the tuner decides on the two sides alone
MIN_POOLED_DF = 3


def compare_pooled(
    candidate: Sequence[float], against: Sequence[float], level: float, groups: Sequence[Sequence[float]] = ()
) -> Comparison:
    """The tuner's decision: `candidate` against `against` by `compare_throughput`, the noise pooled
    over `groups` (every configuration the tune measured, the sides' own runs among them), a side
    with one run decided too, its noise the pool's. Why: a tune measures many configurations on one
    machine within minutes, so their repeats say how much one run scatters here, and a clear
    difference needs no second run of the candidate (Welch's test on two runs a side has about one
    degree of freedom). With fewer than MIN_POOLED_DF degrees of freedom in the pool it decides as
    the report does, on the two sides alone (two runs a side or no decision)."""
    xs = [v for v in candidate if v is not None and v > 0]
    ys = [v for v in against if v is not None and v > 0]
    noise = pooled_noise(groups)
    if noise is None or noise.df < MIN_POOLED_DF:
        return compare_throughput(xs, ys, level=level)
    return compare_throughput(xs, ys, noise=noise, level=level, min_runs=1)
