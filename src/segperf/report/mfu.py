"""MFU across a configuration's runs, as the report shows it: against the peak measured on the
machine (results.json `throughput.measured_mfu`), never above 100%.

A run that beat its peak probe has no MFU, only the reason (`measured_mfu_reason`, written by
segperf.perf.flops.mfu_or_reason); the report says n/a and carries that reason rather than
inventing a number. A results.json from before that rule may hold an MFU over 1: it is read the
same way, as beaten, so no table of old runs shows one either.
"""

from __future__ import annotations

from typing import Any

from segperf.report.stats import summarize
from segperf.report.sweep import Configuration

MFU_PATH, REASON_PATH = "throughput.measured_mfu", "throughput.measured_mfu_reason"
BEATEN = "n/a (probe beaten)"


def _reason(run) -> str | None:
    reason, value = run.get(REASON_PATH), run.get(MFU_PATH)
    if reason:
        return str(reason)
    if isinstance(value, int | float) and value > 1:  # recorded before MFU was capped at its peak
        return f"the peak probe was not representative: the run achieved {value:.1%} of it"
    return None


def mfu_summary(config: Configuration) -> dict[str, Any]:
    """report.json's `measured_mfu`: median/min/max over the runs that have one (null where none
    does), and `not_available`, the reasons of the runs that beat their probe."""
    reasons = [_reason(r) for r in config.ok_runs]
    stat = summarize([None if why else r.get(MFU_PATH) for r, why in zip(config.ok_runs, reasons, strict=True)])
    beaten = [why for why in reasons if why]
    return {
        "median": stat.median,
        "min": stat.min,
        "max": stat.max,
        "runs": stat.n,
        "runs_beaten": len(beaten),
        "not_available": list(dict.fromkeys(beaten)),
    }


def mfu_cell(config: Configuration) -> str:
    """'12.3%' (median), 'n/a (probe beaten)' when every run beat its probe, 'n/a' without a probe."""
    summary = mfu_summary(config)
    if summary["median"] is not None:
        beaten = summary["runs_beaten"]
        return f"{summary['median']:.1%}" + (f" ({beaten} run{'s' * (beaten > 1)} n/a)" if beaten else "")
    return BEATEN if summary["runs_beaten"] else "n/a"


def mfu_notes(configs: list[Configuration]) -> list[str]:
    """One line per configuration whose runs beat their peak probe, with the run's own words."""
    return [f"- `{c.label}`: MFU n/a, {'; '.join(s)}" for c in configs if (s := mfu_summary(c)["not_available"])]
