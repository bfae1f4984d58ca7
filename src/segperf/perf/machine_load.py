"""How busy the machine was around a run: results.json's `machine_load`.

A run that starts while something else keeps the cores busy (another job, a neighbour on a
shared VM, the previous sweep job's workers still exiting) is slower for reasons that have
nothing to do with its settings. The run records the load average and the CPU clock at its
start and at its end, so the report can flag such runs instead of calling the difference a
speed-up. Reading them costs microseconds; where the OS does not say, the value is None.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from segperf.config import available_cores

CPUFREQ = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq"  # kHz, one file per core
CPUINFO = "/proc/cpuinfo"


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (runnable processes, machine-wide); None off Unix."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_mhz(cpufreq: str = CPUFREQ, cpuinfo: str = CPUINFO) -> float | None:
    """The cores' mean current clock in MHz: cpufreq's scaling_cur_freq where the kernel has it,
    else /proc/cpuinfo's "cpu MHz" (VMs often have only that); None when neither is readable."""
    readings = []
    for path in glob.glob(cpufreq):
        try:
            with open(path, encoding="ascii") as f:
                readings.append(int(f.read().strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    if not readings:
        try:
            with open(cpuinfo, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("cpu MHz"):
                        readings.append(float(line.split(":", 1)[1]))
        except (OSError, ValueError):
            pass
    return round(sum(readings) / len(readings), 1) if readings else None


def load_at_start() -> dict[str, Any]:
    """`machine_load` as the run starts; `load_at_end` completes it."""
    return {
        "loadavg_start": load_average(),
        "loadavg_end": None,
        "cpu_mhz_start": cpu_mhz(),
        "cpu_mhz_end": None,
        "cores": available_cores(),  # what a load average is read against: 2.0 is busy on 2 cores, not on 64
    }


def load_at_end(section: dict[str, Any]) -> dict[str, Any]:
    section.update(loadavg_end=load_average(), cpu_mhz_end=cpu_mhz())
    return section


def format_load(section: dict[str, Any] | None) -> str:
    """summary.txt's line: `1-min load 0.42 at start, 1.95 at end (2 cores); CPU 2,445 -> 2,445 MHz`."""
    if not section:
        return "n/a"

    def one_minute(key: str) -> str:
        values = section.get(key)
        return "n/a" if not values else f"{values[0]:.2f}"

    text = f"1-min load {one_minute('loadavg_start')} at start, {one_minute('loadavg_end')} at end"
    text += f" ({section.get('cores', '?')} cores)"
    start, end = section.get("cpu_mhz_start"), section.get("cpu_mhz_end")
    if start is not None or end is not None:
        text += "; CPU " + " -> ".join("n/a" if v is None else f"{v:,.0f}" for v in (start, end)) + " MHz"
    return text
