"""A run's peak memory, and the one rule that says when a configuration needs much more of it than
another: segperf.compare (CAND against REF) and segperf.report (each configuration against the
baseline) both say it in these words, so that a 2x faster configuration at 2.5x the memory
reads the same in both. No torch here: the report reads results.json files only.

A run's peak: host memory (results.json's memory.pressure, else the resource sampler's peak RSS)
and device memory (torch's peak reserved, else NVML's peak).
"""

from __future__ import annotations

from typing import Any

from segperf.perf.memory_trend import size

KINDS = ("host", "device")
# a peak this many times the other's is named; at MORE, a faster side is said to need it
NOTED, MORE = 1.25, 2.0


def run_peaks(results: dict[str, Any]) -> dict[str, int | None]:
    """{"host": bytes, "device": bytes} of one run's results.json (None where not measured)."""
    pressure = (results.get("memory") or {}).get("pressure") or {}
    resources = results.get("resources") or {}
    host = (pressure.get("host") or {}).get("peak_bytes") or resources.get("rss_peak_bytes")
    device = (pressure.get("device") or {}).get("peak_reserved_bytes") or resources.get("peak_reserved_bytes")
    return {"host": host, "device": device or resources.get("gpu_mem_peak_bytes")}


def largest_peaks(results_list: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per kind, the largest peak over runs (repeats of one configuration, one side of a comparison)."""
    peaks = [run_peaks(results) for results in results_list]
    return {kind: max((p[kind] for p in peaks if p[kind]), default=None) for kind in KINDS}


def peak_ratios(ref: dict[str, int | None], cand: dict[str, int | None]) -> dict[str, float]:
    """cand's peak over ref's, per kind where both were measured."""
    return {kind: cand[kind] / ref[kind] for kind in KINDS if ref[kind] and cand[kind]}


def needs_more(
    ref: dict[str, int | None],
    cand: dict[str, int | None],
    speed_ratio: float | None,
    ref_name: str = "REF",
    cand_name: str = "CAND",
) -> list[str]:
    """One sentence per kind where cand needs NOTED x ref's peak or more; at MORE x, a cand that is
    faster (speed_ratio > 1) is said to be faster but to need it: speed is not all it costs."""
    texts = []
    for kind, ratio in peak_ratios(ref, cand).items():
        if ratio >= NOTED:
            faster = "is faster but " if speed_ratio and speed_ratio > 1 and ratio >= MORE else ""
            texts.append(
                f"{cand_name} {faster}needs {ratio:.1f}x {ref_name}'s peak {kind} memory "
                f"({size(cand[kind])} vs {size(ref[kind])})"
            )
    return texts
