"""`profile=ops`: torch.profiler over a few training steps after warm-up.

Produces the seed study's "Torch operations over N steps" table (top operators by self
device time on a GPU, self CPU time otherwise) and a trace that TensorBoard's profiler plugin
(torch-tb-profiler) and chrome://tracing / Perfetto open. Lightning's PyTorchProfiler would do
the recording, but a Trainer has one profiler slot and it is the user's (PerfMonitor only taps
it); this callback drives torch.profiler directly for just the chosen steps. Those steps' timings
include the profiler's own overhead, which the summary says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler


class OperatorProfile(L.Callback):
    def __init__(self, run_dir: str | Path, steps: int = 3, skip_steps: int = 2, row_limit: int = 15) -> None:
        if steps < 1:
            raise ValueError(f"callbacks.operator_profile.steps={steps}: profile at least 1 step (or use profile=off)")
        self.trace_dir = Path(run_dir) / "ops"
        self.steps, self.skip_steps, self.row_limit = steps, skip_steps, row_limit
        self.seen = self.profiled = 0
        self._profiler: profile | None = None
        self.result: dict[str, Any] | None = None

    def record(self, results: dict[str, Any]) -> None:
        """results.json's `ops` section (none when training ended before the profiled steps)."""
        if self.result is not None:
            results["ops"] = self.result

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        # rank 0 only under DDP: one trace folder per run (the ranks run the same operators)
        if self._profiler is None and self.result is None and self.seen == self.skip_steps and trainer.is_global_zero:
            activities = [ProfilerActivity.CPU]
            if trainer.strategy.root_device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            self._profiler = profile(
                activities=activities, on_trace_ready=tensorboard_trace_handler(str(self.trace_dir))
            )
            self._profiler.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.seen += 1
        if self._profiler is not None:
            self.profiled += 1
            if self.profiled == self.steps:
                self._finish(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._profiler is not None:  # the run ended before `steps` steps: keep what there is
            self._finish(trainer)

    def _finish(self, trainer) -> None:
        on_device = trainer.strategy.root_device.type == "cuda"
        if on_device:
            torch.cuda.synchronize()
        self._profiler.stop()  # writes the trace
        averages = self._profiler.key_averages()
        sort_by = "self_cuda_time_total" if on_device else "self_cpu_time_total"
        self.result = {
            "steps": self.profiled,
            "first_step": self.skip_steps + 1,
            "sort_by": sort_by,
            "table": averages.table(sort_by=sort_by, row_limit=self.row_limit),
            "top": [_row(event, on_device) for event in _top(averages, sort_by, self.row_limit)],
            "trace_dir": str(self.trace_dir),
        }
        self._profiler = None


def _top(averages, sort_by: str, limit: int) -> list:
    key = "self_device_time_total" if sort_by == "self_cuda_time_total" else "self_cpu_time_total"
    return sorted(averages, key=lambda event: getattr(event, key, 0.0), reverse=True)[:limit]


def _row(event, on_device: bool) -> dict[str, Any]:
    row = {
        "name": event.key,
        "calls": event.count,
        "self_cpu_s": event.self_cpu_time_total / 1e6,
        "cpu_total_s": event.cpu_time_total / 1e6,
    }
    if on_device:
        row["self_device_s"] = getattr(event, "self_device_time_total", 0.0) / 1e6
        row["device_total_s"] = getattr(event, "device_time_total", 0.0) / 1e6
    return row
