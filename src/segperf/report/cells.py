"""How a configuration's statistics read in the report's tables and on its charts.

One function per kind of cell: a median with its range, a mean ± σ, a min … max, and the
speed-ups against the baseline (ratio of medians; ratio of means with its σ; the confidence
interval that decides). Both speed-ups show the one decision of segperf.report.decide: "~" when
not distinguishable from noise, "(unconfirmed)" with one run on a side, "same as X" when the
configuration ran what X ran. The digits come from segperf.perf.formatting.
"""

from __future__ import annotations

from segperf.perf.formatting import fmt_num
from segperf.report.decide import THROUGHPUT, Decision, decide
from segperf.report.stats import Spread, Stat
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


def _not_applied(config: Configuration) -> str:
    names = list(config.not_applied)
    return f" ({', '.join(names)} not applied)" if names else ""


def _marked(decision: Decision, number: str, config: Configuration) -> str:
    """`number` ("1.23×") with the decision's mark; "same as X" instead for a configuration that
    ran what X ran."""
    if decision.kind == "same":
        return ("not applied: " if not config.applied else "") + f"same as {decision.same_as}"
    if decision.unconfirmed:
        return f"{number} (unconfirmed)" + _not_applied(config)
    return f"{'' if decision.distinguishable else '~'}{number}" + _not_applied(config)


def fmt_median_speedup(config: Configuration, baseline: Configuration | None, path: str = THROUGHPUT) -> str:
    """ "1.23×" (ratio of medians), "~1.02×" when not distinguishable from the baseline,
    "1.14× (unconfirmed)" with a single run on a side, "same as X", or "baseline"."""
    decision = decide(config, baseline, path)
    if decision.kind in ("baseline", "n/a"):
        return decision.kind
    return _marked(decision, "" if decision.speedup is None else f"{decision.speedup:.2f}×", config)


def fmt_mean_speedup(config: Configuration, baseline: Configuration | None, path: str = THROUGHPUT) -> str:
    """ "2.68 ± 0.04×" (the ratio of means and its propagated σ), marked as fmt_median_speedup is."""
    decision = decide(config, baseline, path)
    if decision.kind in ("baseline", "n/a") or (decision.kind == "ratio" and decision.mean_speedup is None):
        return "n/a" if decision.kind == "ratio" else decision.kind
    ratio = decision.mean_speedup
    number = "" if ratio is None else f"{ratio[0]:.2f}×" if ratio[1] is None else f"{ratio[0]:.2f} ± {ratio[1]:.2f}×"
    return _marked(decision, number, config)


def fmt_interval(config: Configuration, baseline: Configuration | None, path: str = THROUGHPUT) -> str:
    """ "1.80–2.23×": the confidence interval of the ratio of geometric means that decides;
    "n/a (1 run)" where it cannot be computed."""
    decision = decide(config, baseline, path)
    test = decision.test
    if decision.kind != "ratio" or test is None:
        return "—" if decision.kind == "baseline" else "n/a"
    if test.low is None:
        return f"n/a ({min(test.n_a, test.n_b)} run)"
    return f"{test.low:.2f}–{test.high:.2f}×"
