"""CPU, RSS and GPU usage of the training process tree, sampled in the background and cut into phase windows.

Why a hand-written sampler: Lightning's DeviceStatsMonitor logs once per step, from the training loop, and sees
neither the CPU time of DataLoader worker processes nor NVML's sub-second utilization samples. Here a daemon thread
reads /proc (machine.ProcessTree) and NVML every `interval_s`; the phase timing asks `window(t0, t1)` afterwards with
`time.perf_counter()` stamps, so nothing runs per step. Its own cost is measured (`overhead_fraction()`).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

# format_*: re-exported for the summary tables (they live in machine.py, whose header needs them too)
from segperf.perf.machine import ProcessTree, format_mib, format_percent_of_cores, format_usage  # noqa: F401

_t_of = attrgetter("t")


@dataclass(slots=True)
class ResourceSample:
    t: float  # time.perf_counter() when taken
    cpu_percent: float | None  # process tree, since the previous sample; 100 = one core busy
    rss_bytes: int | None  # process tree sum; pages shared by forked workers count in each, so it over-states
    gpu_util_percent: float | None  # NVML; latest known value (see NvmlGpu.read_util)
    gpu_mem_bytes: int | None  # NVML used memory of the whole device, incl. other processes


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
    nearest: bool = False  # window held no sample; stats come from the one sample nearest to it


class GpuUnavailable(Exception):
    pass


class NvmlGpu:
    """One GPU through NVML. The index is NVML's: it equals the torch index only when CUDA_VISIBLE_DEVICES is unset
    (or lists devices in NVML order) - NVML ignores that variable; mapping by PCI bus id would fix it, we do not.

    Memory is `nvmlDeviceGetMemoryInfo().used`: the whole device, including other processes and the CUDA context,
    so it is >= torch's reserved memory. Utilization comes from `nvmlDeviceGetSamples` (the driver's own sub-second
    samples, only the ones newer than the last seen timestamp), else from `nvmlDeviceGetUtilizationRates` (one
    average over the driver's 1/6-1 s period)."""

    NOT_FOUND_LIMIT = 20  # consecutive "no new sample" answers, before any sample ever came, before falling back

    def __init__(self, index: int, nvml: Any = None, notes: list[str] | None = None) -> None:
        self.index, self.notes = index, []  # probe notes go to the caller's list only if the GPU is usable
        try:
            if nvml is None:
                import pynvml as nvml
            self.nvml = nvml
            nvml.nvmlInit()
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            raise GpuUnavailable(f"{type(e).__name__}: {e}") from e
        try:
            self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self.last_seen, self.mode, self._not_found, self._seen_any = 0, "samples", 0, False
            self.mem_ok = True
            try:
                self.read_mem()
            except nvml.NVMLError_NotSupported:
                self.mem_ok = False
            self.read_util()  # primes last_seen: samples from before the sampler started are dropped
            if not self.mem_ok and self.mode == "off":
                raise GpuUnavailable("device reports 'not supported' for memory and utilization")
        except GpuUnavailable:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise GpuUnavailable(f"{type(e).__name__}: {e}") from e
        if not self.mem_ok:
            self.notes.append("GPU memory: nvmlDeviceGetMemoryInfo not supported; not sampled")
        if notes is not None:
            notes.extend(self.notes)
            self.notes = notes

    def read_mem(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def read_util(self) -> list[float]:
        """Utilization values that are new since the last call (empty: nothing new)."""
        nvml = self.nvml
        if self.mode == "samples":
            try:
                _, samples = nvml.nvmlDeviceGetSamples(self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self.last_seen)
            except nvml.NVMLError_NotFound:  # normal between driver samples; persistent only if it never samples
                self._not_found += 1
                if self._seen_any or self._not_found < self.NOT_FOUND_LIMIT:
                    return []
                self._fall_back("never returned a sample")
            except nvml.NVMLError_NotSupported as e:  # e.g. MIG
                self._fall_back(f"not supported ({e})")
            else:
                new = [s for s in samples if s.timeStamp > self.last_seen]
                if new:
                    self.last_seen, self._seen_any = max(s.timeStamp for s in new), True
                self._not_found = 0
                return [float(s.sampleValue.uiVal) for s in new]
        if self.mode == "rates":
            try:
                return [float(nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)]
            except nvml.NVMLError_NotSupported:
                self.mode = "off"
                self.notes.append("GPU util: nvmlDeviceGetUtilizationRates not supported either; not sampled")
        return []

    def _fall_back(self, why: str) -> None:
        self.mode = "rates"
        self.notes.append(
            f"GPU util: nvmlDeviceGetSamples {why}; using nvmlDeviceGetUtilizationRates (coarse 1/6-1 s average)"
        )

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


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
        cpu = rss = mem = None
        if self._tree_ok:
            cpu, rss = self._guard("tree", lambda: self._read_tree(t)) or (None, None)
        if self.gpu is not None:
            if self._util_ok and self.gpu.mode != "off":
                new = self._guard("util", self.gpu.read_util)
                if new:
                    self._util = sum(new) / len(new)
                elif new is None or self.gpu.mode == "off":
                    self._util = None
            if self._mem_ok and self.gpu.mem_ok:
                mem = self._guard("mem", self.gpu.read_mem)
        sample = ResourceSample(t, cpu, rss, self._util, mem)
        self.samples.append(sample)
        return sample

    def _read_tree(self, t: float) -> tuple[float | None, int]:
        cpu_s, rss = self._tree.read()
        dt, self._last_t = t - self._last_t, t
        return (100.0 * cpu_s / dt if dt > 0 else None), rss

    def window(self, t0: float, t1: float) -> WindowStats:
        """Stats of the samples taken in [t0, t1] (perf_counter seconds). A sample's CPU% covers the interval before
        it, so a window holding no sample uses the first sample after it (whose interval covers it), else the last."""
        samples = self.samples[:]
        lo, hi = bisect_left(samples, t0, key=_t_of), bisect_right(samples, t1, key=_t_of)
        if lo < hi:
            return _stats(samples[lo:hi])
        if not samples:
            return WindowStats(samples=0)
        stats = _stats([samples[min(hi, len(samples) - 1)]])
        stats.nearest = True
        return stats

    def overall(self) -> WindowStats:
        return _stats(self.samples[:]) if self.samples else WindowStats(samples=0)

    def overhead_fraction(self) -> float:
        """CPU time the sampling thread used / wall time it ran (thread CPU from time.thread_time())."""
        wall = (self._t_end or time.perf_counter()) - self._t_start
        return self._thread_cpu / wall if self._thread is not None and wall > 0 else 0.0


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q / 100
    i = int(pos)
    j = min(i + 1, len(sorted_values) - 1)
    return sorted_values[i] + (sorted_values[j] - sorted_values[i]) * (pos - i)


def _stats(samples: list[ResourceSample]) -> WindowStats:
    cpu = [s.cpu_percent for s in samples if s.cpu_percent is not None]
    rss = [s.rss_bytes for s in samples if s.rss_bytes is not None]
    util = sorted(s.gpu_util_percent for s in samples if s.gpu_util_percent is not None)
    mem = [s.gpu_mem_bytes for s in samples if s.gpu_mem_bytes is not None]
    stats = WindowStats(len(samples), sum(cpu) / len(cpu) if cpu else None, max(rss, default=None))
    if util:
        stats.gpu_util_mean_percent = sum(util) / len(util)
        stats.gpu_util_p50, stats.gpu_util_p90 = _percentile(util, 50), _percentile(util, 90)
        stats.gpu_util_max = util[-1]
    stats.gpu_mem_peak_bytes = max(mem, default=None)
    return stats


def torch_memory(device: Any, reset: bool = False) -> dict[str, int | None]:
    """Peak torch allocated/reserved bytes on a cuda device (None elsewhere); `reset` starts a new peak (per phase)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
    out = {
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
    }
    if reset:
        torch.cuda.reset_peak_memory_stats(dev)
    return out
