"""One GPU's utilization and memory through NVML (`import pynvml`, from nvidia-ml-py).

Lightning's DeviceStatsMonitor reads torch's allocator, not the device's utilization; NVML is the
only source of "how busy was the GPU", so this reader is hand-written (and faked in the tests).
"""

from __future__ import annotations

from typing import Any


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
