"""How much one run's images/s scatters between runs made at different times on this machine: the
term that turns the tune's intervals into ones a later run falls in (segperf.perf.decision.later_interval).

A tune sees the noise of its own minutes only; on a shared machine runs made an hour later scatter
more (other tenants come and go, and a configuration using every core feels them more than one
using one core). Where the figure comes from, first found first:

1. `tune.later_noise=0.03` on the command line (0: the intervals are of the tune's minutes alone);
2. what `python -m segperf.tune calibrate` measured on this machine (its long runs' run-to-run noise
   over the study's hour), recorded in the segperf cache under `later-noise.json`, one entry per
   machine (host name, CPU model and cores);
3. DEFAULT: 5%, the most that the calibration studies in docs/BENCHMARKS.md ("Tuning") measured
   for a 64-step run on shared 2-core cloud machines (4.5% and 3.4% in two hours of long runs; the
   probes 5.8% and 3.6%). A quieter machine measured once gets narrower intervals.

Whatever the source, a later run is counted at no less than the scatter of the tune's own runs
(later_interval): on a machine busier than its figure, the intervals count the scatter the tune saw.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segperf.config import segperf_cache_dir
from segperf.perf.machine import cpu_model
from segperf.perf.results import write_json_atomic

DEFAULT = 0.05
RECORD = "later-noise.json"


@dataclass(frozen=True)
class LaterNoise:
    """One run's relative images/s scatter between runs made at other times (0.05: 5%) and where
    that figure came from, as the report says it."""

    relative: float
    source: str


NOT_COUNTED = LaterNoise(0.0, "not counted")


def machine_key() -> str:
    """The machine a record is of: its host, CPU model and logical cores (the host tells a cloud
    machine of one type from another: their neighbours, and so their drift, differ)."""
    return " / ".join([socket.gethostname(), cpu_model(), f"{os.cpu_count()} cores"])


def record_path() -> Path:
    return segperf_cache_dir() / RECORD


def recorded(path: Path | None = None) -> dict[str, Any]:
    """Every machine's entry of the record ({} without one, or with one that does not parse: the
    default then stands, and the next study writes it again)."""
    try:
        data = json.loads((path or record_path()).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def for_this_machine(setting: float | None = None, path: Path | None = None) -> LaterNoise:
    """The later-run noise a tune on this machine counts (see the module docstring for the order)."""
    if setting is not None:
        return LaterNoise(float(setting), f"tune.later_noise={setting:g}")
    entry = recorded(path).get(machine_key())
    if isinstance(entry, dict) and isinstance(entry.get("relative"), int | float) and entry["relative"] >= 0:
        return LaterNoise(
            float(entry["relative"]),
            f"measured on this machine by python -m segperf.tune calibrate on {entry.get('date', '?')} "
            f"({entry.get('df', '?')} degrees of freedom)",
        )
    return LaterNoise(
        DEFAULT, "the default for a shared machine never measured (python -m segperf.tune calibrate measures it)"
    )


def remember(relative: float, df: int, study: str | Path, path: Path | None = None) -> Path:
    """Record `relative` as this machine's later-run noise (atomically; other machines' entries kept)."""
    path = path or record_path()
    data = recorded(path)
    data[machine_key()] = {
        "relative": relative,
        "df": df,
        "date": dt.date.today().isoformat(),
        "study": str(study),
    }
    return write_json_atomic(path, data)
