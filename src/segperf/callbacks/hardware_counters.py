"""HardwareCounters (`profile=counters`): `perf stat` over the training steps after warm-up.

The callback attaches `perf stat -x, -p <pids>` to this process and its DataLoader workers when the
first step after warm-up starts, and stops it (SIGINT, as Ctrl-C would) when training ends; the
reading and the reasons it may be unavailable are segperf.perf.counters'.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning as L

from segperf.perf.counters import EVENTS, parse_perf_stat, unavailable_reason
from segperf.perf.proctree import tree_pids


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
