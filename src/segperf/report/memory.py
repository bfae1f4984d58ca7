"""report.md's Memory section and report.json's `memory` per configuration: each configuration's
peak host and device memory (the largest over its runs), its ratio to the baseline's, whether its
runs crept, and the sentence segperf.compare says when a configuration needs much more memory than
the baseline (segperf.perf.memory_peaks: one rule for both, e.g. "`workers=auto` is faster but
needs 2.5x `workers=off`'s peak host memory").
"""

from __future__ import annotations

from typing import Any

from segperf.perf.formatting import md_table
from segperf.perf.memory_peaks import KINDS, largest_peaks, needs_more, peak_ratios
from segperf.perf.memory_trend import size
from segperf.report.decide import decide
from segperf.report.sweep import Configuration


def _creep(config: Configuration) -> dict[str, Any]:
    """How many runs were judged, how many crept (confirmed), and the fastest host/device rate."""
    creeps = [c for r in config.ok_runs if isinstance(c := r.get("memory.creep"), dict)]
    confirmed = [c for c in creeps if c.get("state") == "confirmed"]
    rates = {
        f"{kind}_bytes_per_step": max((c[f"{kind}_bytes_per_step"] or 0 for c in confirmed), default=0) or None
        for kind in KINDS
    }
    return {"judged_runs": len(creeps), "creeping_runs": len(confirmed), **rates}


def config_memory(config: Configuration, baseline: Configuration | None, names=lambda label: label) -> dict[str, Any]:
    """One configuration's memory (module doc); `baseline` None: no ratios and no sentence.
    `names` writes a configuration's label in the sentence (report.md quotes it as code)."""
    peaks = largest_peaks([r.results for r in config.ok_runs])
    record: dict[str, Any] = {"peak_bytes": peaks, "peak_ratio": None, "creep": _creep(config), "text": None}
    if baseline is not None and baseline is not config:
        base = largest_peaks([r.results for r in baseline.ok_runs])
        speed = decide(config, baseline).speedup  # the training table's speed-up: faster means > 1
        record["peak_ratio"] = peak_ratios(base, peaks)
        texts = needs_more(base, peaks, speed, names(baseline.label), names(config.label))
        record["text"] = "; ".join(texts) or None
    return record


def _creep_cell(creep: dict[str, Any]) -> str:
    if not creep["judged_runs"]:
        return "n/a"
    if not creep["creeping_runs"]:
        return "none"
    rates = [f"{kind} +{size(creep[f'{kind}_bytes_per_step'])}" for kind in KINDS if creep[f"{kind}_bytes_per_step"]]
    return f"**{creep['creeping_runs']} of {creep['judged_runs']} runs** ({', '.join(rates)} a step)"


def memory_section(configs: list[Configuration], baseline: Configuration | None) -> list[str]:
    """A row per configuration: peak host and device memory with their ratio to the baseline, and
    creep; then a line for each configuration that needs 1.25x the baseline's memory or more.
    Nothing where no run measured memory."""
    records = [config_memory(c, baseline, names=lambda label: f"`{label}`") for c in configs]
    if not any(peak for r in records for peak in r["peak_bytes"].values()):
        return []
    rows = []
    for config, record in zip(configs, records, strict=True):
        row = [config.label]
        for kind in KINDS:
            ratio = (record["peak_ratio"] or {}).get(kind)
            ratio = 1.0 if config is baseline and record["peak_bytes"][kind] else ratio
            row += [size(record["peak_bytes"][kind]), _ratio(ratio)]
        rows.append([*row, _creep_cell(record["creep"])])
    headers = ["configuration", "peak host memory", "× baseline", "peak device memory", "× baseline", "creep"]
    lines = ["## Memory", "", *md_table(headers, rows, right={1, 2, 3, 4}), ""]
    lines += [f"- {r['text']}." for r in records if r["text"]]
    lines += [
        *([""] if any(r["text"] for r in records) else []),
        "Peak: the largest over a configuration's runs; host: resident memory of the run's process tree "
        "(memory.pressure.host, else the sampler's peak RSS); device: torch's peak reserved memory (else "
        f"NVML's). × baseline: against `{baseline.label if baseline else 'n/a'}`. Creep: runs whose memory "
        "grew step after step (segperf's MemoryWatch), with the fastest rate.",
        "",
    ]
    return lines


def _ratio(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}×"
