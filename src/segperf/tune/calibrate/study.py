"""What a calibration study reads and computes, without running anything: the configurations
and decisions a tune recorded (its tune.json), the probes' and long runs' images/s side by side,
whether the tune's printed intervals hold the long runs' ratios, and the run-to-run noises."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from statistics import NormalDist
from typing import Any

from segperf.perf.decision import Noise, pooled_noise
from segperf.tune.probe import Config
from segperf.tune.side_by_side import final_table, full_rates, tuned_against_presets

WITHIN = 0.15  # a probe within ±15% of the long run's images/s counts as calibrated


def visited(record: dict[str, Any]) -> dict[str, Config]:
    """The configurations a tune measured for speed, by label (what they change on the start), in
    the order first met: the final side by side's, then every step's two sides."""
    result = record["result"]
    start = tuple(result.get("start") or ())
    found: dict[str, Config] = {}

    def add(config: Sequence[str]) -> None:
        config = tuple(config)
        changed = " ".join(o for o in config if o not in set(start)) or "start"
        found.setdefault(changed, config)

    for config in (result.get("final_configs") or {}).values():
        add(config)
    for step in result.get("steps") or []:
        if step.get("stage") == "quality":
            continue
        if step.get("candidate_probes") or step.get("against_probes"):
            add(step["against"])
            add(step["candidate"])
    return {label: config for label, config in found.items() if config not in never_ran(record)}


def never_ran(record: dict[str, Any]) -> set[Config]:
    """The configurations every probe of which the tune cut at its time limit or saw fail (fp16
    emulated on a CPU: minutes a step): the tune has no rate of theirs to calibrate, and a study
    run of one, without the tune's time limit, could take an hour."""
    ran: dict[Config, bool] = {}
    for config, probes in speed_sides(record):
        for probe in probes:  # an empty record of a probe says nothing against it
            finished = not probe or (probe.get("images_per_s") is not None and not probe.get("cut"))
            ran[config] = ran.get(config, False) or finished
    return {config for config, finished in ran.items() if not finished}


def speed_sides(record: dict[str, Any]) -> Iterator[tuple[Config, list[dict[str, Any]]]]:
    """Each side of each speed comparison the tune recorded: its configuration and the probes it
    was decided on (every probe of that run so far, in order)."""
    for step in record["result"].get("steps") or []:
        if step.get("stage") == "quality":
            continue
        for side in ("candidate", "against"):
            yield tuple(step[side]), step.get(f"{side}_probes") or []


def decisions(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The tune's decisions that printed an interval: the two sides' configurations, the ratio and
    interval it printed (where a later run falls), the interval of the tune's own minutes it decided
    on (the printed one in a record from before the two differed), its verdict."""
    return [
        {
            "stage": step["stage"],
            "axis": step["axis"],
            "candidate": tuple(step["candidate"]),
            "against": tuple(step["against"]),
            "ratio": step.get("ratio"),
            "low": step["low"],
            "high": step["high"],
            "own": [step.get("tune_low") or step["low"], step.get("tune_high") or step["high"]],
            "verdict": step.get("verdict"),
        }
        for step in record["result"].get("steps") or []
        if step.get("stage") != "quality" and step.get("low") is not None and step.get("high") is not None
    ]


def geomean(values: Sequence[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def table(configs: dict[str, Config], probes: dict[str, list], longs: dict[str, list]) -> list[dict[str, Any]]:
    """One row per configuration: the probes' and the long runs' geometric mean images/s and their ratio."""
    rows = []
    for label in configs:
        probe, long = geomean(probes.get(label, [])), geomean(longs.get(label, []))
        ratio = probe / long if probe and long else None
        rows.append(
            {
                "configuration": label,
                "probe_images_per_s": probe,
                "long_images_per_s": long,
                "probe_over_long": ratio,
                "within": None if ratio is None else abs(ratio - 1) <= WITHIN,
                "probes": probes.get(label, []),
                "long_runs": longs.get(label, []),
            }
        )
    return rows


def coverage(
    found: list[dict[str, Any]],
    configs: dict[str, Config],
    longs: dict[str, list],
    level: float = 0.95,
    noise: Noise | None = None,
) -> list[dict[str, Any]]:
    """Each decision with the ratio the long runs give for its two sides, whether its printed
    interval holds it (`covered`), and whether the printed ratio agrees with it within both sides'
    noise (`consistent`: the long runs' ratio is itself an estimate, see `consistent`)."""
    by_config = {config: label for label, config in configs.items()}
    noise = noise or long_noise(longs)
    rows = []
    for decision in found:
        a, b = by_config.get(decision["candidate"]), by_config.get(decision["against"])
        long_a, long_b = geomean(longs.get(a, [])), geomean(longs.get(b, []))
        truth = long_a / long_b if long_a and long_b else None
        covered = None if truth is None else decision["low"] <= truth <= decision["high"]
        runs = (len(_rated(longs.get(a, []))), len(_rated(longs.get(b, []))))
        own = decision.get("own") or (decision["low"], decision["high"])
        agrees = consistent(decision["ratio"], *own, truth, runs, noise, level)
        rows.append(
            {**decision, "candidate": a, "against": b, "long_ratio": truth, "covered": covered, "consistent": agrees}
        )
    return rows


def long_noise(longs: dict[str, list]) -> Noise | None:
    """The long runs' run-to-run noise: the variance of log images/s about each configuration's
    mean, pooled over every configuration with two or more (segperf.perf.decision.pooled_noise)."""
    return pooled_noise([_rated(runs) for runs in longs.values()])


def consistent(
    ratio: float | None,
    low: float | None,
    high: float | None,
    truth: float | None,
    runs: tuple[int, int],
    noise: Noise | None,
    level: float,
) -> bool | None:
    """Whether a printed ratio and the long runs' ratio differ by less than both estimates' noise
    allows: |log printed - log long| <= z x sqrt(se_printed^2 + se_long^2), where se_printed is the
    half-width in logs over z (the normal quantile at `level`; the tune's t quantile is larger, so
    this overstates se_printed a little) of the tune's own interval, `low`-`high` (of its minutes,
    not the printed one, which adds a later run's scatter), and se_long is the long runs' pooled
    noise over `runs` runs a side. Why beside `covered`: with two long runs a side the long
    runs' ratio scatters by about as much as a tune's interval is wide, so an interval that is
    right about the ratio misses the long runs' estimate of it about a third of the time."""
    if None in (ratio, low, high, truth) or noise is None or min(runs) < 1:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    se_printed = math.log(high / low) / (2 * z)
    se_long = math.sqrt(noise.variance * (1 / runs[0] + 1 / runs[1]))
    return bool(abs(math.log(ratio / truth)) <= z * math.hypot(se_printed, se_long))


def tune_noise(record: dict[str, Any]) -> Noise | None:
    """The run-to-run noise of the tune's own speed probes (its full runs, pooled over every
    configuration it measured twice or more): the noise its printed intervals were made with."""
    result = record["result"]
    final = [
        (tuple((result.get("final_configs") or {}).get(name) or ()), probes)
        for name, probes in (result.get("final") or {}).items()
    ]
    longest: dict[Config, list[dict[str, Any]]] = {}  # a run's probes accumulate: its longest list has them all
    for config, probes in [*speed_sides(record), *final]:
        if len(probes) > len(longest.get(config, [])):
            longest[config] = probes
    return pooled_noise([full_rates(probes) for probes in longest.values()])


def _rated(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v]


def final_labels(configs: dict[str, Config], record: dict[str, Any]) -> dict[str, str]:
    """The final side by side's names (start, each preset, tuned) -> their labels in `configs`."""
    by_config = {config: label for label, config in configs.items()}
    final = record["result"].get("final_configs") or {}
    return {name: by_config[tuple(config)] for name, config in final.items() if tuple(config) in by_config}


def claims(
    record: dict[str, Any], names: dict[str, str], longs: dict[str, list], noise: Noise | None = None
) -> dict[str, Any]:
    """The tune's printed claims (segperf.tune.report: each final configuration against the start,
    the tuned one against the fastest other) beside the ratios of the long runs' geometric means,
    and the tuned configuration against the fastest other by the long runs alone (the bar: 0.90x)."""
    level = float(record.get("settings", {}).get("level") or 0.95)
    noise = noise or long_noise(longs)
    rate = {name: geomean(longs.get(label, [])) for name, label in names.items()}
    count = {name: len(_rated(longs.get(label, []))) for name, label in names.items()}
    rows = []
    for row in final_table(record["result"], level):
        if row["name"] == "start" or row["vs_start"] is None:
            continue
        low, high = row["vs_start_interval"]
        truth = rate[row["name"]] / rate["start"] if rate.get(row["name"]) and rate.get("start") else None
        covered = None if truth is None or low is None else low <= truth <= high
        sides = (count[row["name"]], count["start"])
        rows.append(
            {
                "claim": f"{row['name']} vs start",
                "ratio": row["vs_start"],
                "low": low,
                "high": high,
                "long_ratio": truth,
                "covered": covered,
                "consistent": consistent(row["vs_start"], *row["vs_start_own_interval"], truth, sides, noise, level),
            }
        )
    printed = tuned_against_presets(record["result"], level)
    others = {n: r for n, r in rate.items() if n not in ("tuned", "start") and r}
    fastest = max(others, key=others.__getitem__) if others else None
    against = fastest and rate.get("tuned") and rate["tuned"] / others[fastest]
    if printed is not None:
        truth = (
            rate.get("tuned") / rate[printed["against"]] if rate.get("tuned") and rate.get(printed["against"]) else None
        )
        covered = None if truth is None or printed["low"] is None else printed["low"] <= truth <= printed["high"]
        sides = (count.get("tuned", 0), count.get(printed["against"], 0))
        rows.append(
            {
                "claim": f"tuned vs {printed['against']}",
                "ratio": printed["ratio"],
                "low": printed["low"],
                "high": printed["high"],
                "long_ratio": truth,
                "covered": covered,
                "consistent": consistent(printed["ratio"], *printed["own"], truth, sides, noise, level),
            }
        )
    return {
        "rows": rows,
        "long_images_per_s": rate,
        "long_runs": count,
        "fastest_other": fastest,
        "tuned_vs_fastest": against or None,
        "reaches_0_90": None if not against else against >= 0.90,
    }


def study_noises(record: dict[str, Any], probes: dict, longs: dict) -> dict[str, Noise | None]:
    """The run-to-run noise of the tune's own probes, of the study's probes and of its long runs."""
    return {
        "the tune's probes": tune_noise(record),
        "the study's probes": pooled_noise([_rated(v) for v in probes.values()]),
        "the long runs": long_noise(longs),
    }


def machine_noise(noises: dict[str, Noise | None]) -> Noise | None:
    """How much one run scattered between the study's runs of a configuration: the larger of the
    probes' and the long runs' pooled noise (a later run may be either; the safe side is the wider)."""
    found = [n for n in (noises["the study's probes"], noises["the long runs"]) if n is not None]
    return max(found, key=lambda n: n.relative) if found else None
