"""The tuner's search (segperf.tune.search.tuner.Tuner): its stages, budget and verdicts, one
module each; tuner.py reads top to bottom."""

from segperf.tune.search.budget import FINAL_GIVE_UP_FAILURES
from segperf.tune.search.quality_guard import QUALITY_TOLERANCE
from segperf.tune.search.records import QualityCheck, Step, TuneError, TuneResult
from segperf.tune.search.tuner import Tuner, search_arguments
from segperf.tune.search.verdicts import (
    FAILED,
    KEPT,
    NOT_APPLIED,
    SAME,
    SKIPPED,
    SLOWER,
    UNCOMPILED_TIE,
    UNMEASURED,
    WORSE,
    Verdict,
    stops_compiling,
)

__all__ = [
    "FAILED",
    "FINAL_GIVE_UP_FAILURES",
    "KEPT",
    "NOT_APPLIED",
    "QUALITY_TOLERANCE",
    "SAME",
    "SKIPPED",
    "SLOWER",
    "UNCOMPILED_TIE",
    "UNMEASURED",
    "WORSE",
    "QualityCheck",
    "Step",
    "TuneError",
    "TuneResult",
    "Tuner",
    "Verdict",
    "search_arguments",
    "stops_compiling",
]
