"""ShareCores: on a CPU run, torch's threads leave busy DataLoader workers their cores.

On a CPU the training step and the DataLoader workers run on the same cores. PyTorch gives each
worker process one thread for that reason, but the main process keeps one thread per core: with
a loader that decodes and augments in Python (PIL), 2 workers beside torch's 2 threads on 2
cores made each step compute 2.3x slower, and `workers=auto` bought 1.16x where, with one
thread fewer, it bought 1.61x (docs/BENCHMARKS.md). A loader that keeps its workers idle most of
the time (MNIST from memory, the U-Net's small JPEGs) must keep every thread: one fewer ran
0.67-0.69x as fast there. Which case a run is in shows only once it trains, so this callback
measures it: over `measure_steps` steps after the warm-up it reads the CPU seconds the workers
(the process's descendants) used, and from then on sets torch's threads to what the verdict's
cpu-contended rule gives (segperf.perf.verdict.threads_beside_workers: the cores less the
workers' share, rounded, at least 1), or leaves them.

The measuring steps join the warm-up of every callback that times throughput (those with an
`extend_warmup` method: PerfMonitor, the tuner's ScreenOut), so images/s is of the steps that ran
with the threads the run kept. Nothing is changed where the run's threads were given
(`num_threads`), on an accelerator, with no workers, or with several processes on the node (DDP
ranks share the cores), nor in a run too short to keep timed steps after them; `record` says
which, and results.json's `share_cores` what it measured.

Why by hand: Lightning and PyTorch set no intra-op thread count from the DataLoader's load.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from segperf.callbacks.loader_settings import train_loader
from segperf.config import available_cores
from segperf.perf.proctree import ProcessTree
from segperf.perf.verdict import threads_beside_workers

SECTION = "share_cores"


class ShareCores(L.Callback):
    def __init__(self, measure_steps: int = 3, warmup_steps: int = 2, num_threads: int | None = None) -> None:
        """
        Args:
            measure_steps: steps after the warm-up over which the workers' CPU is read; they join
                the warm-up (kept out of images/s).
            warmup_steps: the run's own warm-up steps (compilation, the workers' start), not measured.
            num_threads: the run's given torch threads: when set, nothing is changed.
        """
        if measure_steps < 1 or warmup_steps < 0:
            raise ValueError(
                f"ShareCores(measure_steps={measure_steps}, warmup_steps={warmup_steps}): "
                "measure_steps must be >= 1 and warmup_steps >= 0"
            )
        self.measure_steps, self.warmup_steps, self.num_threads = measure_steps, warmup_steps, num_threads
        self.steps = 0
        self.active = False
        self._tree: ProcessTree | None = None
        self._t0 = 0.0
        self.section: dict[str, Any] = {"applied": False, "reason": "training did not start"}

    def on_train_start(self, trainer, pl_module) -> None:
        reason = self._why_not(trainer)
        if reason is not None:
            self.section = {"applied": False, "reason": reason}
            return
        self.active = True
        self.section = {"applied": False, "reason": "the run ended before the measuring steps did"}
        for callback in trainer.callbacks:
            if callback is not self and hasattr(callback, "extend_warmup"):
                callback.extend_warmup(self.measure_steps)

    def _why_not(self, trainer) -> str | None:
        if self.num_threads is not None:
            return f"num_threads={self.num_threads} was given"
        if trainer.strategy.root_device.type != "cpu":
            return f"the step runs on {trainer.strategy.root_device.type}, not on the cores the workers use"
        if trainer.world_size > 1:
            return f"{trainer.world_size} processes share the cores"
        loader = train_loader(trainer)
        if loader is None or not loader.num_workers:
            return "no DataLoader workers"
        steps = trainer.estimated_stepping_batches
        if steps < self.warmup_steps + 2 * self.measure_steps:  # it would leave too few timed steps
            return f"the run has {steps} steps: too few to measure beyond its warm-up and still time steps"
        return None

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        if not self.active:
            return
        if self.steps == self.warmup_steps:
            self._tree, self._t0 = ProcessTree(refresh_s=3600.0), time.perf_counter()
        elif self.steps == self.warmup_steps + self.measure_steps and self._tree is not None:
            self._decide()

    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.steps += 1

    def _decide(self) -> None:
        self._tree.read()
        seconds = time.perf_counter() - self._t0
        workers = self._tree.children_cpu_s / seconds if seconds > 0 else None
        self._tree.close()
        self._tree, self.active = None, False
        cores = available_cores()
        threads = torch.get_num_threads()
        fewer = threads_beside_workers(cores, threads, workers)
        self.section = {
            "applied": fewer is not None,
            "workers_cores": None if workers is None else round(workers, 3),
            "cores": cores,
            "threads_before": threads,
            "threads_after": fewer or threads,
            "measured_steps": self.measure_steps,
            "measured_s": round(seconds, 3),
        }
        if fewer is not None:
            torch.set_num_threads(fewer)

    def record(self, results: dict[str, Any]) -> None:
        """results.json `share_cores`, and a notice when it changed the threads."""
        results[SECTION] = dict(self.section)
        if self.section.get("applied"):
            s = self.section
            results["torch_threads"] = s["threads_after"]  # what the timed steps ran with
            results.setdefault("notices", []).append(
                f"torch threads {s['threads_before']} -> {s['threads_after']} after the warm-up: the DataLoader "
                f"workers kept {s['workers_cores']:.2f} of {s['cores']} cores busy (threads=default leaves them "
                "their cores on a CPU; num_threads=N keeps N)"
            )
