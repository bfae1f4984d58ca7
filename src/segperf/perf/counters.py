"""`profile=counters`: CPU hardware counters of the training steps, from Linux `perf stat`.

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
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning as L

from segperf.perf.proctree import tree_pids

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


class HardwareCounters(L.Callback):
    """perf stat over the training steps after the first `skip_steps` (warm-up) to the end of training."""

    def __init__(self, run_dir: str | Path, skip_steps: int = 2, events: tuple[str, ...] = EVENTS) -> None:
        self.output = Path(run_dir) / "perf-stat.csv"
        self.skip_steps, self.events = skip_steps, events
        self.seen = 0
        self._proc: subprocess.Popen | None = None
        self._started_at: float | None = None
        self.result: dict[str, Any] | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self._proc is None and self.result is None and self.seen == self.skip_steps:
            if trainer.is_global_zero:  # under DDP: rank 0's process (one perf-stat.csv per run)
                self._start()
            else:
                self.result = {"available": False, "reason": "counted on rank 0 only"}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.seen += 1

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop()

    def _start(self) -> None:
        reason = unavailable_reason()
        if reason is not None:
            self.result = {"available": False, "reason": reason}
            return
        pids = ",".join(map(str, tree_pids(os.getpid())))  # this process and its DataLoader workers
        command = ["perf", "stat", "-x,", "-e", ",".join(self.events), "-o", str(self.output), "-p", pids]
        self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._started_at = time.perf_counter()

    def _stop(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # perf stat writes its counts on SIGINT
        try:
            _, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        seconds = time.perf_counter() - (self._started_at or time.perf_counter())
        text = self.output.read_text() if self.output.exists() else ""
        self.result = parse_perf_stat(text)
        self.result |= {"seconds": seconds, "events": list(self.events), "file": self.output.name}
        if not self.result["available"] and proc.returncode not in (0, -signal.SIGINT, 130):
            first = next((line.strip() for line in (stderr or "").splitlines() if line.strip()), "")
            self.result["reason"] = f"perf stat failed (exit {proc.returncode}): {first or 'no message'}"

    def record(self, results: dict[str, Any]) -> None:
        """results.json's `counters` section, whatever happened to the run."""
        results["counters"] = self.finish()

    def finish(self) -> dict[str, Any]:
        """The `counters` section, also when training ended before warm-up did or failed."""
        self._stop()
        if self.result is None:
            return {"available": False, "reason": f"training ended before step {self.skip_steps + 1} (warm-up)"}
        return self.result


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
