"""How busy the machine was around a run: results.json's `machine_load`.

A run that shares the cores with something else (another job, a neighbour on a shared VM, the
previous sweep job's workers still exiting) is slower for reasons that have nothing to do with
its settings. The run records, so the report can flag it instead of calling the difference a
speed-up:

- `others_cores`: the cores other processes kept busy *during* the run, on average — the busy
  time of the CPUs this process may use (/proc/stat), less this process tree's own CPU time (its
  threads, its DataLoader workers and compile workers, live or reaped), over the run's wall time;
  and `steal_cores`, the time a VM's hypervisor gave those CPUs to someone else. Measured, not
  estimated: the 1-minute load average lags by a minute and still holds the previous job's
  workers when a sweep's next job starts.
- the load average and the CPU clock at the start and the end, as context.

Reading them costs microseconds at the start and the end; where the OS does not say, a value
is None.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

from segperf.config import available_cores
from segperf.perf.proctree import tree_pids

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


@dataclass(frozen=True)
class CpuClock:
    """CPU seconds so far: `busy` and `steal` of the CPUs this process may run on (only those of
    its affinity mask: in a container on a larger host the other CPUs' load is not ours), `own`
    of this process tree; `wall` the monotonic clock when read."""

    wall: float
    busy: float
    steal: float
    own: float


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system seconds of a process (default: this one) and of all its descendants (listed
    as the sampler lists them, segperf.perf.proctree): each live one's own, and what each has
    reaped (the kernel adds a reaped child's time, its own reaped children's included, to its
    parent: finished DataLoader workers, a compile pool's)."""
    total = 0.0
    for pid in tree_pids(os.getpid() if root is None else root):
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone meanwhile: its reaper now holds its time
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def cpu_clock() -> CpuClock | None:
    """The machine's and this process tree's CPU seconds now; None where psutil cannot say."""
    try:
        per_cpu = psutil.cpu_times(percpu=True)
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(len(per_cpu))
        mine = [per_cpu[i] for i in allowed if i < len(per_cpu)] or per_cpu
        # Linux counts guest time inside user time as well: leave guest out of the sum, and idle,
        # iowait (idle while a disk works) and steal (another VM ran) out of busy
        idle = ("idle", "iowait", "steal", "guest", "guest_nice")
        busy = sum(sum(getattr(t, f) for f in t._fields if f not in idle) for t in mine)
        steal = sum(getattr(t, "steal", 0.0) for t in mine)
        return CpuClock(time.monotonic(), busy, steal, tree_cpu_seconds())
    except (OSError, AttributeError, psutil.Error):
        return None


def others_since(before: CpuClock | None) -> dict[str, float | None]:
    """`others_cores` (cores other processes kept busy since `before`, on average), `steal_cores`
    and `window_s`; None values when either reading is missing."""
    after = cpu_clock()
    if before is None or after is None or after.wall <= before.wall:
        return {"others_cores": None, "steal_cores": None, "window_s": None}
    wall = after.wall - before.wall
    others = max(0.0, (after.busy - before.busy) - (after.own - before.own)) / wall
    steal = max(0.0, after.steal - before.steal) / wall
    return {"others_cores": round(others, 3), "steal_cores": round(steal, 3), "window_s": round(wall, 2)}


def load_at_start() -> tuple[dict[str, Any], CpuClock | None]:
    """`machine_load` as the run starts, and the CPU clock `load_at_end` measures the run's
    others_cores from."""
    section = {
        "loadavg_start": load_average(),
        "loadavg_end": None,
        "cpu_mhz_start": cpu_mhz(),
        "cpu_mhz_end": None,
        "cores": available_cores(),  # what a load average is read against: 2.0 is busy on 2 cores, not on 64
        "others_cores": None,
        "steal_cores": None,
        "window_s": None,
    }
    return section, cpu_clock()


def load_at_end(section: dict[str, Any], start: CpuClock | None) -> dict[str, Any]:
    section.update(loadavg_end=load_average(), cpu_mhz_end=cpu_mhz(), **others_since(start))
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
    if section.get("others_cores") is not None:
        text += f"; other processes {section['others_cores']:.2f} cores during the run"
        if (section.get("steal_cores") or 0.0) >= 0.005:  # shown when it rounds to something
            text += f", VM steal {section['steal_cores']:.2f}"
    start, end = section.get("cpu_mhz_start"), section.get("cpu_mhz_end")
    if start is not None or end is not None:
        text += "; CPU " + " -> ".join("n/a" if v is None else f"{v:,.0f}" for v in (start, end)) + " MHz"
    return text
