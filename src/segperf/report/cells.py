"""How a configuration's statistics read in the report's tables and on its charts.

One function per kind of cell: a median with its range, a mean ± σ, a min … max, and the two
speed-ups against the baseline (ratio of medians marked "~" when within noise; ratio of means
with its σ). The numbers come from segperf.report.stats, the digits from segperf.perf.formatting.
"""

from __future__ import annotations

from segperf.perf.formatting import fmt_num
from segperf.report.stats import Spread, Stat, distinguishable, median_ratio, speedup
from segperf.report.sweep import Configuration


def fmt_range(stat: Stat) -> str:
    """ "2.10 [1.97–2.33]"; a single run says it has no spread rather than showing a fake range."""
    if stat.median is None:
        return "n/a"
    if stat.n == 1:
        return f"{fmt_num(stat.median)} (1 run, no spread)"
    return f"{fmt_num(stat.median)} [{fmt_num(stat.min)}–{fmt_num(stat.max)}]"


def fmt_pm(value: float | None, std: float | None) -> str:
    """ "2.10 ± 0.10": the σ with as many decimals as the value shows (hyperfine's style)."""
    text = fmt_num(value)
    if value is None or std is None:
        return text
    decimals = len(text.split(".")[1]) if "." in text else 0
    return f"{text} ± {std:,.{decimals}f}"


def fmt_min_max(s: Spread) -> str:
    """ "2.00 … 2.20", hyperfine's range."""
    return "n/a" if s.min is None else f"{fmt_num(s.min)} … {fmt_num(s.max)}"


def fmt_median_speedup(config: Configuration, baseline: Configuration | None, path: str) -> str:
    """ "1.23×" (ratio of medians), prefixed "~" when the ranges overlap the baseline's (noise);
    "baseline" for the baseline itself."""
    if baseline is None:
        return "n/a"
    if config is baseline:
        return "baseline"
    a, b = config.stat(path), baseline.stat(path)
    ratio = median_ratio(a, b)
    if ratio is None:
        return "n/a"
    return f"{'' if distinguishable(a, b) else '~'}{ratio:.2f}×"


def fmt_mean_speedup(config: Configuration, baseline: Configuration | None, path: str) -> str:
    """ "2.68 ± 0.04×" (the ratio of means and its propagated σ); "baseline" for the baseline."""
    if baseline is None:
        return "n/a"
    if config is baseline:
        return "baseline"
    ratio = speedup(config.spread(path), baseline.spread(path))
    if ratio is None:
        return "n/a"
    return f"{ratio[0]:.2f}×" if ratio[1] is None else f"{ratio[0]:.2f} ± {ratio[1]:.2f}×"
