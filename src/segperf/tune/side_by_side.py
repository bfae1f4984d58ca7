"""The tune's final side by side as numbers, from its record (tune.json's `result`): each final
configuration's images/s and its ratio to the start's, and the tuned one against the fastest other.

Every ratio is the search's own decision (segperf.perf.decision.compare_throughput: the ratio of
geometric means, the noise pooled over the final side by side's full runs), with the interval a
later run of each side falls in at the tune's level (later_interval, counting the machine's
later-run noise the tune recorded). tune_report.md (segperf.tune.report), its charts
(segperf.tune.report_charts), tuned.yaml's header (segperf.tune.output) and the calibration
(segperf.tune.calibrate) all read these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from segperf.perf.decision import Noise, compare_throughput, later_interval, pooled_noise
from segperf.report.stats import summarize
from segperf.tune.journal import probes_from_dicts
from segperf.tune.probe import full_runs, rates


def label(config: Sequence[str], start: Sequence[str]) -> str:
    """A configuration as what it changes on the start ("start" for the start itself)."""
    changed = [o for o in config if o not in set(start)]
    return " ".join(changed) if changed else "start"


def later_of(result: Mapping[str, Any]) -> float:
    """The later-run noise the tune's printed intervals count (0 for a record from before it)."""
    return float((result.get("later_noise") or {}).get("relative") or 0.0)


def relative(noise: Noise | None) -> float:
    return noise.relative if noise is not None else 0.0


def final_noise(final: Mapping[str, Any]) -> Noise | None:
    """The run-to-run noise pooled over every configuration of the final side-by-side (its full runs)."""
    return pooled_noise([full_rates(probes) for probes in final.values()])


def full_rates(records: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """The images/s of the recorded probes with a full run's, by the search's own rule (Probe.full_run)."""
    return rates(full_runs(probes_from_dicts(records)))


def final_table(result: Mapping[str, Any], level: float) -> list[dict[str, Any]]:
    """The final side-by-side: each configuration's images/s and its ratio to the start's."""
    final, configs = result.get("final") or {}, result.get("final_configs") or {}
    start, noise = full_rates(final.get("start") or []), final_noise(final)
    rows = []
    for name, probes in final.items():
        mine = full_rates(probes)
        stat = summarize(mine)
        versus = compare_throughput(mine, start, noise, level)
        low, high = later_interval(versus, later_of(result), relative(noise))
        rows.append(
            {
                "name": name,
                "config": list(configs.get(name) or []),
                "runs": stat.n,
                "images_per_s": {"median": stat.median, "min": stat.min, "max": stat.max},
                "vs_start": None if name == "start" else versus.ratio,
                "vs_start_interval": None if name == "start" else [low, high],
                # the interval of the tune's own minutes (the one `distinguishable` reads)
                "vs_start_own_interval": None if name == "start" else [versus.low, versus.high],
                "distinguishable": None if name == "start" else versus.distinguishable,
            }
        )
    return rows


def tuned_against_presets(result: Mapping[str, Any], level: float) -> dict[str, Any] | None:
    """The tuned configuration against the fastest other one of the final side-by-side."""
    final = result.get("final") or {}
    tuned = full_rates(final.get("tuned") or [])
    others = {n: rated for n, p in final.items() if n != "tuned" and (rated := full_rates(p))}
    if not tuned or not others:
        return None
    best = max(others, key=lambda n: summarize(others[n]).median)
    noise = final_noise(final)
    versus = compare_throughput(tuned, others[best], noise, level)
    low, high = later_interval(versus, later_of(result), relative(noise))
    return {"against": best, "ratio": versus.ratio, "low": low, "high": high, "own": [versus.low, versus.high]}
