"""`profile=counters`: reading CPU hardware counters from Linux `perf stat` (the callback that runs
it over the training steps is segperf.callbacks.hardware_counters).

The seed's CPU study ran `perf stat -e cycles,instructions,cache-misses,cache-references` around
whole scripts. Here the same events are counted for the training steps after warm-up only: the
callback attaches `perf stat -x, -p <pids>` to this process and its DataLoader workers when the
first step after warm-up starts, and stops it (SIGINT, as Ctrl-C would) when training ends, so
start-up, data checks and compilation stay out. Validation pauses inside that window are counted.
No Python library reads these counters portably (they need perf_event_open and the kernel's event
tables), hence a perf subprocess. Where perf is missing, not permitted or sees no counters (most
VMs and containers), `results.json` gets `counters.available: false` with one line saying why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

EVENTS = ("cycles", "instructions", "cache-references", "cache-misses")
INSTALL_HINT = "install perf (Debian: apt install linux-perf; Ubuntu: apt install linux-tools-$(uname -r))"
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def unavailable_reason(perf: str | None = None, paranoid_file: Path = PARANOID) -> str | None:
    """Why perf cannot count this process here, before trying; None when it may."""
    if (perf or shutil.which("perf")) is None:
        return f"perf not found: {INSTALL_HINT}"
    try:
        paranoid = int(paranoid_file.read_text())
    except (OSError, ValueError):
        return None  # not Linux, or no such setting: let perf itself say
    if paranoid > 2 and os.geteuid() != 0:
        return (
            f"kernel.perf_event_paranoid={paranoid} forbids counting for unprivileged users: "
            "run as root, or `sysctl kernel.perf_event_paranoid=2`"
        )
    return None


def _event_name(field: str) -> str:
    """'cpu_core/cycles/u' or 'cycles:u' -> 'cycles' (hybrid-CPU PMU prefixes, user-only modifiers)."""
    if "/" in field:
        field = field.split("/")[1]
    return field.split(":")[0]


def parse_perf_stat(text: str) -> dict[str, Any]:
    """The `counters` section from `perf stat -x,` output (CSV: value, unit, event, run time,
    percent of time counted, metric, metric unit; `#` lines are comments).

    Counts of one event over several PMUs (hybrid CPUs' cpu_core and cpu_atom) are summed;
    `<not supported>` / `<not counted>` leave an event out. `multiplexed` is true when perf had
    to share counters and scaled a count up from part of the run."""
    counts: dict[str, int] = {}
    missing: dict[str, str] = {}
    multiplexed = False
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, event = fields[0].strip(), _event_name(fields[2].strip())
        if value.startswith("<"):  # <not supported>, <not counted>
            missing.setdefault(event, value.strip("<>"))
            continue
        try:
            count = int(float(value))
        except ValueError:
            continue
        counts[event] = counts.get(event, 0) + count
        missing.pop(event, None)
        if len(fields) > 4 and fields[4] and float(fields[4]) < 100.0:
            multiplexed = True
    cycles, instructions = counts.get("cycles"), counts.get("instructions")
    references, misses = counts.get("cache-references"), counts.get("cache-misses")
    section: dict[str, Any] = {
        "available": bool(counts),
        "cycles": cycles,
        "instructions": instructions,
        "ipc": instructions / cycles if cycles and instructions is not None else None,
        "cache_references": references,
        "cache_misses": misses,
        "miss_rate": misses / references if references and misses is not None else None,
        "multiplexed": multiplexed,
        "not_counted": {event: missing[event] for event in sorted(missing) if event not in counts},
    }
    if not counts:
        what = ", ".join(f"{e} <{m}>" for e, m in section["not_counted"].items()) or "no counts in its output"
        section["reason"] = f"perf sees no hardware counters here ({what}): a VM or container without PMU access?"
    return section


def format_counters(counters: dict[str, Any]) -> list[str]:
    """summary.txt rows: the counts and the seed's two ratios, or the one line saying why not."""
    if not counters.get("available"):
        return [f"n/a: {counters.get('reason', 'not recorded')}"]

    def count(value: int | None) -> str:
        return "n/a" if value is None else f"{value:,}"

    ipc, miss_rate = counters.get("ipc"), counters.get("miss_rate")
    rows = [
        f"{'cycles':<24}{count(counters.get('cycles'))}",
        f"{'instructions':<24}{count(counters.get('instructions'))}"
        + ("" if ipc is None else f"   # {ipc:.2f} insn per cycle"),
        f"{'cache-references':<24}{count(counters.get('cache_references'))}",
        f"{'cache-misses':<24}{count(counters.get('cache_misses'))}"
        + ("" if miss_rate is None else f"   # {miss_rate:.2%} of all cache refs"),
        f"{'counted for':<24}{counters.get('seconds', 0):.2f} s (training steps after warm-up)",
    ]
    if counters.get("multiplexed"):
        rows.append("(counters were multiplexed: perf scaled some counts up from part of the time)")
    rows += [f"{event}: <{why}>" for event, why in (counters.get("not_counted") or {}).items()]
    return rows
