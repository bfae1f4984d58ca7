"""CPU, RSS and GPU usage of the training process tree, sampled in the background and cut into phase windows.

Why a hand-written sampler: Lightning's DeviceStatsMonitor logs once per step, from the training loop, and sees
neither the CPU time of DataLoader worker processes nor NVML's sub-second utilization samples. Here a daemon thread
reads /proc (proctree.ProcessTree) and NVML every `interval_s`; the phase timing asks `window(t0, t1)` afterwards with
`time.perf_counter()` stamps, so nothing runs per step. Its own cost is measured (`overhead_fraction()`).
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from segperf.perf.nvml import GpuUnavailable, NvmlGpu
from segperf.perf.proctree import ProcessTree

_t_of = attrgetter("t")


# samples held at most (~1.5 MB); at 0.05 s, the first 14 minutes at full rate
MAX_SAMPLES = 16384


@dataclass(slots=True)
class ResourceSample:
    t: float  # time.perf_counter() when taken
    cpu_percent: float | None  # process tree, since the previous sample; 100 = one core busy
    rss_bytes: int | None  # process tree sum; pages shared by forked workers count in each, so it over-states
    gpu_util_percent: float | None  # NVML; latest known value (see NvmlGpu.read_util)
    gpu_mem_bytes: int | None  # NVML used memory of the whole device, incl. other processes
    # the descendants' share of cpu_percent (DataLoader workers); 100 = one core busy
    workers_cpu_percent: float | None = None


@dataclass
class WindowStats:
    samples: int
    cpu_mean_percent: float | None = None
    rss_peak_bytes: int | None = None
    gpu_util_mean_percent: float | None = None
    gpu_util_p50: float | None = None
    gpu_util_p90: float | None = None
    gpu_util_max: float | None = None
    gpu_mem_peak_bytes: int | None = None
    workers_cpu_mean_percent: float | None = None
    nearest: bool = False  # window held no sample; stats come from the one sample nearest to it


class ResourceSampler:
    """Background sampler of the whole process tree (this process + descendants, e.g. DataLoader workers) and one GPU.

    CPU% per sample = the tree's (user+system) CPU seconds since the previous sample / wall seconds between them
    (see ProcessTree for children that come and go). Errors never reach training: a field that fails is dropped
    for the rest of the run and `notes` says why."""

    def __init__(
        self, interval_s: float = 0.05, gpu_index: int | None = None, nvml: Any = None, children_refresh_s: float = 0.5
    ) -> None:
        self.interval_s, self.gpu_index, self._nvml = interval_s, gpu_index, nvml
        self.children_refresh_s = children_refresh_s
        self.samples: list[ResourceSample] = []
        self.notes: list[str] = []
        self.gpu: NvmlGpu | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tree: ProcessTree | None = None
        self._tree_ok = self._util_ok = self._mem_ok = True
        self._util: float | None = None
        self._t_start = self._t_end = self._last_t = 0.0
        self._thread_cpu = 0.0
        # bounded for a long run: past MAX_SAMPLES, every other sample is dropped and one in `_stride`
        # kept from then on (evenly spread over the run); the peaks are kept from every sample
        self._taken, self._stride = 0, 1
        self.peak_rss_bytes: int | None = None
        self.peak_gpu_mem_bytes: int | None = None

    def start(self) -> ResourceSampler:
        if self._thread is not None:
            return self
        if self.gpu_index is not None:
            try:
                self.gpu = NvmlGpu(self.gpu_index, self._nvml, self.notes)
            except GpuUnavailable as e:
                self.notes.append(f"GPU: n/a (NVML not available: {e})")
        self._tree = self._guard("tree", lambda: ProcessTree(self.children_refresh_s))
        self._t_start = self._last_t = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="ResourceSampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Join the thread, take a last sample (so the final phase is covered), shut NVML down. Idempotent."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.sample_once()
        self._t_end = time.perf_counter()
        if self._tree is not None:
            self._tree.close()
        if self.gpu is not None:
            self.gpu.close()

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        cpu0, next_t = time.thread_time(), self._t_start + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.perf_counter())):
            self.sample_once()
            self._thread_cpu = time.thread_time() - cpu0
            next_t = max(next_t + self.interval_s, time.perf_counter())  # fell behind: no burst of catch-up samples

    def _guard(self, field: str, fn):
        try:
            return fn()
        except Exception as e:
            setattr(self, f"_{field}_ok", False)
            self.notes.append(f"{field}: sampling stopped after {type(e).__name__}: {e}")
            return None

    def sample_once(self) -> ResourceSample:
        """Take one sample now (the thread calls this; tests may call it directly)."""
        t = time.perf_counter()
        cpu = rss = mem = workers = None
        if self._tree_ok:
            cpu, rss, workers = self._guard("tree", lambda: self._read_tree(t)) or (None, None, None)
        if self.gpu is not None:
            if self._util_ok and self.gpu.mode != "off":
                new = self._guard("util", self.gpu.read_util)
                if new:
                    self._util = sum(new) / len(new)
                elif new is None or self.gpu.mode == "off":
                    self._util = None
            if self._mem_ok and self.gpu.mem_ok:
                mem = self._guard("mem", self.gpu.read_mem)
        sample = ResourceSample(t, cpu, rss, self._util, mem, workers)
        self.peak_rss_bytes = max(self.peak_rss_bytes or 0, rss or 0) or None
        self.peak_gpu_mem_bytes = max(self.peak_gpu_mem_bytes or 0, mem or 0) or None
        self._taken += 1
        if self._taken % self._stride == 0:
            self.samples.append(sample)
            if len(self.samples) > MAX_SAMPLES:  # a long run: keep every other one, and half as many from now
                self.samples = self.samples[::2]
                self._stride *= 2
        return sample

    def _read_tree(self, t: float) -> tuple[float | None, int, float | None]:
        cpu_s, rss = self._tree.read()
        dt, self._last_t = t - self._last_t, t
        if dt <= 0:
            return None, rss, None
        return 100.0 * cpu_s / dt, rss, 100.0 * self._tree.children_cpu_s / dt

    def window(self, *spans: tuple[float, float]) -> WindowStats:
        """Stats of the samples taken in the spans [t0, t1] (perf_counter seconds; a phase's calls). A sample's CPU%
        covers the interval before it, so spans holding no sample use the first sample after the first span (whose
        interval covers it), else the last sample."""
        samples = self.samples[:]
        if not samples or not spans:
            return WindowStats(samples=0)
        # each sample between the first span's start and the last one's end, kept where the span
        # starting last before it still holds it: a phase's windows are thousands of short spans
        # (a step's data wait each) and the samples a few: one pass over the samples, not one
        # search per span (the phases' windows never overlap; overlapping spans count a sample once)
        ordered = sorted(spans)
        starts = [t0 for t0, _ in ordered]
        last_end = max(t1 for _, t1 in ordered)
        lo, hi = bisect_left(samples, starts[0], key=_t_of), bisect_right(samples, last_end, key=_t_of)
        reach, chosen = [], []
        for t1 in (t1 for _, t1 in ordered):  # the latest end of any span starting at or before each start
            reach.append(max(t1, reach[-1]) if reach else t1)
        for sample in samples[lo:hi]:
            i = bisect_right(starts, sample.t) - 1
            if i >= 0 and sample.t <= reach[i]:
                chosen.append(sample)
        if chosen:
            return _stats(chosen)
        after = bisect_right(samples, ordered[0][1], key=_t_of)
        stats = _stats([samples[min(after, len(samples) - 1)]])
        stats.nearest = True
        return stats

    def overall(self) -> WindowStats:
        stats = _stats(self.samples[:]) if self.samples else WindowStats(samples=0)
        if self.samples:  # every sample's peaks, those dropped in a long run included
            stats.rss_peak_bytes = max(stats.rss_peak_bytes or 0, self.peak_rss_bytes or 0) or None
            stats.gpu_mem_peak_bytes = max(stats.gpu_mem_peak_bytes or 0, self.peak_gpu_mem_bytes or 0) or None
        return stats

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the sampling thread used (time.thread_time() in the thread itself)."""
        return self._thread_cpu

    def overhead_fraction(self) -> float:
        """CPU time the sampling thread used / wall time it ran."""
        wall = (self._t_end or time.perf_counter()) - self._t_start
        return self.thread_cpu_s / wall if self._thread is not None and wall > 0 else 0.0


def merge_stats(a: WindowStats | None, b: WindowStats | None) -> WindowStats | None:
    """Stats of two windows' samples together: means weighted by their samples, peaks the larger;
    the GPU utilization's p50/p90 (overall only) are not merged. None when both are None."""
    if a is None or b is None:
        return a or b
    n = a.samples + b.samples
    merged = WindowStats(n, nearest=a.nearest and b.nearest)

    def mean(key: str) -> float | None:
        x, y = getattr(a, key), getattr(b, key)
        if x is None or y is None:
            return x if y is None else y
        return (x * a.samples + y * b.samples) / n if n else (x + y) / 2

    def peak(key: str):
        x, y = getattr(a, key), getattr(b, key)
        return max((v for v in (x, y) if v is not None), default=None)

    for key in ("cpu_mean_percent", "gpu_util_mean_percent", "workers_cpu_mean_percent"):
        setattr(merged, key, mean(key))
    for key in ("rss_peak_bytes", "gpu_mem_peak_bytes", "gpu_util_max"):
        setattr(merged, key, peak(key))
    return merged


def _stats(samples: list[ResourceSample]) -> WindowStats:
    cpu = [s.cpu_percent for s in samples if s.cpu_percent is not None]
    rss = [s.rss_bytes for s in samples if s.rss_bytes is not None]
    util = sorted(s.gpu_util_percent for s in samples if s.gpu_util_percent is not None)
    mem = [s.gpu_mem_bytes for s in samples if s.gpu_mem_bytes is not None]
    stats = WindowStats(len(samples), sum(cpu) / len(cpu) if cpu else None, max(rss, default=None))
    workers = [s.workers_cpu_percent for s in samples if s.workers_cpu_percent is not None]
    stats.workers_cpu_mean_percent = sum(workers) / len(workers) if workers else None
    if util:
        stats.gpu_util_mean_percent = sum(util) / len(util)
        stats.gpu_util_p50, stats.gpu_util_p90 = (float(x) for x in np.percentile(util, [50, 90]))
        stats.gpu_util_max = util[-1]
    stats.gpu_mem_peak_bytes = max(mem, default=None)
    return stats


def sampled_gpu() -> int:
    """The GPU this process trains on. Under DDP the sampler starts before Lightning picks the
    rank's device, so read the rank: LOCAL_RANK (set for the ranks Lightning or torchrun start)
    or SLURM_LOCALID (srun); one process: torch's current device."""
    import torch

    for key in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(key, "")
        if value.isdigit() and int(value) < torch.cuda.device_count():
            return int(value)
    return torch.cuda.current_device()
