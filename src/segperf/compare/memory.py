"""Peak memory of each side of a comparison: a faster candidate that needs twice the memory says so.

A side's peak is the largest over its runs: host memory (results.json's memory.pressure, else
the resource sampler's peak RSS) and device memory (torch's peak reserved, else NVML's peak).
"""

from __future__ import annotations

from typing import Any

from segperf.perf.memory_trend import size

# CAND's peak over REF's at or above which the comparison names it; at MORE it is said loudly
NOTED, MORE = 1.25, 2.0


def run_peaks(results: dict[str, Any]) -> dict[str, int | None]:
    pressure = (results.get("memory") or {}).get("pressure") or {}
    resources = results.get("resources") or {}
    host = (pressure.get("host") or {}).get("peak_bytes") or resources.get("rss_peak_bytes")
    device = (pressure.get("device") or {}).get("peak_reserved_bytes") or resources.get("peak_reserved_bytes")
    return {"host": host, "device": device or resources.get("gpu_mem_peak_bytes")}


def side_peaks(runs: list[Any]) -> dict[str, int | None]:
    peaks = [run_peaks(run.results) for run in runs]
    return {kind: max((p[kind] for p in peaks if p[kind]), default=None) for kind in ("host", "device")}


def memory_comparison(ref_runs: list[Any], cand_runs: list[Any], speed_ratio: float | None) -> dict[str, Any]:
    """compare.json's `memory`: each side's peaks, CAND/REF per kind, and the sentence to print."""
    ref, cand = side_peaks(ref_runs), side_peaks(cand_runs)
    record: dict[str, Any] = {"ref_peak_bytes": ref, "cand_peak_bytes": cand, "ratio": {}, "text": None}
    texts = []
    for kind in ("host", "device"):
        if not ref[kind] or not cand[kind]:
            continue
        ratio = record["ratio"][kind] = cand[kind] / ref[kind]
        if ratio >= NOTED:
            faster = "is faster but " if speed_ratio and speed_ratio > 1 and ratio >= MORE else ""
            texts.append(
                f"CAND {faster}needs {ratio:.1f}x REF's peak {kind} memory ({size(cand[kind])} vs {size(ref[kind])})"
            )
    record["text"] = "; ".join(texts) or None
    return record
