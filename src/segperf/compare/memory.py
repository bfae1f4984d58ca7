"""Peak memory of each side of a comparison: a faster candidate that needs twice the memory says so.

A side's peak is the largest over its runs; the peaks and the rule that names a side needing more
are segperf.perf.memory_peaks', which segperf.report says the same way.
"""

from __future__ import annotations

from typing import Any

from segperf.perf.memory_peaks import largest_peaks, needs_more, peak_ratios


def memory_comparison(ref_runs: list[Any], cand_runs: list[Any], speed_ratio: float | None) -> dict[str, Any]:
    """compare.json's `memory`: each side's peaks, CAND/REF per kind, and the sentence to print."""
    ref = largest_peaks([run.results for run in ref_runs])
    cand = largest_peaks([run.results for run in cand_runs])
    return {
        "ref_peak_bytes": ref,
        "cand_peak_bytes": cand,
        "ratio": peak_ratios(ref, cand),
        "text": "; ".join(needs_more(ref, cand, speed_ratio)) or None,
    }
