"""ResourceMonitor: CPU, RSS and GPU use of the training process tree, in the background.

Why not Lightning's DeviceStatsMonitor: it logs once per step from the training loop and sees
neither the CPU time of DataLoader worker processes nor NVML's sub-second GPU utilization. The
sampler (segperf.perf.sampler) reads /proc and NVML from a daemon thread every `interval_s`;
this callback starts it when the run starts (or at `setup`) and cuts its samples into the phase
windows at the end, so nothing runs per step.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from segperf.perf.device_memory import torch_memory
from segperf.perf.phases import Interval
from segperf.perf.sampler import ResourceSampler, WindowStats, merge_stats, sampled_gpu
from segperf.perf.verdict import STEADY_PHASES

# what each phase row of results.json holds from the resource samples taken during it
PHASE_RESOURCES = ("cpu_mean_percent", "rss_peak_bytes", "gpu_util_mean_percent", "gpu_mem_peak_bytes")
TRAINING = "(training)"  # the folded stats of the steady training phases together


class ResourceMonitor(L.Callback):
    def __init__(self, interval_s: float = 0.05) -> None:
        if interval_s <= 0:
            raise ValueError(f"sample_interval_s={interval_s}: must be > 0 seconds")
        self.interval_s = interval_s
        self.sampler: ResourceSampler | None = None
        self._folded: dict[str, WindowStats] = {}  # per phase, over a long run's folded windows

    def start(self) -> ResourceSampler:
        """Start sampling (once); says what this machine lets it not see (no GPU, no NVML)."""
        if self.sampler is None:
            gpu_index = sampled_gpu() if torch.cuda.is_available() else None
            self.sampler = ResourceSampler(interval_s=self.interval_s, gpu_index=gpu_index)
            if gpu_index is None:
                self.sampler.notes.append("GPU: none visible to torch; GPU utilization and memory not sampled")
            self.sampler.start()
            if rank_zero_only.rank == 0:
                for note in self.sampler.notes:
                    logging.getLogger("segperf").info("segperf: note: %s", note)
        return self.sampler

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.start()

    def fold(self, windows: dict[str, list[Interval]]) -> None:
        """A long run's folded part (segperf.perf.folding): each phase's stats over its `windows`
        now, while the samples are there, added to what earlier folds saw."""
        sampler = self.start()
        for phase, spans in windows.items():
            self._folded[phase] = merge_stats(self._folded.get(phase), sampler.window(*spans))
        training = sampler.window(*(span for phase in STEADY_PHASES for span in windows.get(phase, [])))
        self._folded[TRAINING] = merge_stats(self._folded.get(TRAINING), training)

    def record(self, results: dict[str, Any], windows: dict[str, list[Interval]], device: torch.device) -> None:
        """results.json's `resources`, and each phase row's share of them (the samples of its windows,
        with those of the windows folded before)."""
        sampler = self.start()
        sampler.stop()
        for phase, row in (results.get("phases") or {}).items():
            stats = sampler.window(*windows[phase]) if windows.get(phase) else None
            stats = merge_stats(self._folded.get(phase), stats) or sampler.window()
            row.update({key: getattr(stats, key) for key in PHASE_RESOURCES})
        overall = sampler.overall()
        # what the DataLoader workers used while training ran (warm-up and validation left out):
        # the cores they take from torch's threads on a CPU (the verdict's cpu-contended)
        spans = [span for phase in STEADY_PHASES for span in windows.get(phase, [])]
        training = merge_stats(self._folded.get(TRAINING), sampler.window(*spans) if spans else None)
        training = training or sampler.window()
        results["resources"] = {
            "interval_s": sampler.interval_s,
            "samples": overall.samples,
            "cpu_mean_percent": overall.cpu_mean_percent,
            "rss_peak_bytes": overall.rss_peak_bytes,
            "gpu_util_mean_percent": overall.gpu_util_mean_percent,
            "gpu_util_p50": overall.gpu_util_p50,
            "gpu_util_p90": overall.gpu_util_p90,
            "gpu_util_max": overall.gpu_util_max,
            "gpu_mem_peak_bytes": overall.gpu_mem_peak_bytes,
            "workers_cpu_mean_percent": overall.workers_cpu_mean_percent,
            "workers_cpu_training_percent": None if training.nearest else training.workers_cpu_mean_percent,
            **torch_memory(device),
            "sampler_overhead_fraction": sampler.overhead_fraction(),
            "notes": list(sampler.notes),
        }

    def log_series(self, trainer, run_start: float) -> None:
        """The samples as TensorBoard time series (~1 per second, x = milliseconds into the run)."""
        if self.sampler is None:
            return
        every = max(1, int(1.0 / self.sampler.interval_s))
        for logger in trainer.loggers:
            if not isinstance(logger, TensorBoardLogger):
                continue
            writer = logger.experiment
            for sample in self.sampler.samples[::every]:
                step = int((sample.t - run_start) * 1000)
                writer.add_scalar("resources/cpu_percent", sample.cpu_percent, step)
                writer.add_scalar("resources/rss_mib", sample.rss_bytes / 2**20, step)
                if sample.gpu_util_percent is not None:
                    writer.add_scalar("resources/gpu_util_percent", sample.gpu_util_percent, step)
                if sample.gpu_mem_bytes is not None:
                    writer.add_scalar("resources/gpu_mem_mib", sample.gpu_mem_bytes / 2**20, step)
