"""A stand-in for the `pynvml` module (nvidia-ml-py) with programmable behaviour, so the GPU columns of the resource
sampler are tested on a machine without a GPU.

Only what segperf.perf.nvml uses is here, with pynvml's names. `nvmlDeviceGetSamples` behaves like NVML: it
returns only samples newer than the timestamp passed in, and raises NVMLError_NotFound when there are none.
"""

from __future__ import annotations

import types
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's spelling
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class FakeNvml(types.ModuleType):
    """Behaviours: `missing` (nvmlInit raises NVMLError_LibraryNotFound), `samples_error` (an exception class
    nvmlDeviceGetSamples raises, e.g. NVMLError_NotSupported as under MIG), `rates_supported`, `mem_supported`,
    `mem_error` (raised by nvmlDeviceGetMemoryInfo, e.g. RuntimeError mid-run). `push(ts_us, value)` adds a
    driver sample; `calls` records every call by name, `seen_args` the timestamps passed to nvmlDeviceGetSamples."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVML_VALUE_TYPE_UNSIGNED_INT = 1

    def __init__(
        self,
        *,
        missing: bool = False,
        samples_error: type[Exception] | None = None,
        rates_supported: bool = True,
        mem_supported: bool = True,
        rates_util: int = 37,
        mem_used: int = 1 << 30,
    ) -> None:
        super().__init__("pynvml")
        self.missing, self.samples_error = missing, samples_error
        self.rates_supported, self.mem_supported = rates_supported, mem_supported
        self.rates_util, self.mem_used = rates_util, mem_used
        self.mem_error: Exception | None = None
        self.buffer: list[SimpleNamespace] = []
        self.calls: list[str] = []
        self.seen_args: list[int] = []

    def push(self, ts_us: int, value: int) -> None:
        self.buffer.append(SimpleNamespace(timeStamp=ts_us, sampleValue=SimpleNamespace(uiVal=value)))

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.missing:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        return f"handle{index}"

    def nvmlDeviceGetMemoryInfo(self, handle) -> SimpleNamespace:
        self.calls.append("nvmlDeviceGetMemoryInfo")
        if not self.mem_supported:
            raise NVMLError_NotSupported("Not Supported")
        if self.mem_error is not None:
            raise self.mem_error
        return SimpleNamespace(total=6144 << 20, used=self.mem_used, free=(6144 << 20) - self.mem_used)

    def nvmlDeviceGetSamples(self, handle, sampling_type: int, last_seen: int):
        self.calls.append("nvmlDeviceGetSamples")
        self.seen_args.append(last_seen)
        assert sampling_type == self.NVML_GPU_UTILIZATION_SAMPLES
        if self.samples_error is not None:
            raise self.samples_error("Not Supported")
        new = [s for s in self.buffer if s.timeStamp > last_seen]
        if not new:
            raise NVMLError_NotFound("Not Found")
        return self.NVML_VALUE_TYPE_UNSIGNED_INT, new

    def nvmlDeviceGetUtilizationRates(self, handle) -> SimpleNamespace:
        self.calls.append("nvmlDeviceGetUtilizationRates")
        if not self.rates_supported:
            raise NVMLError_NotSupported("Not Supported")
        return SimpleNamespace(gpu=self.rates_util, memory=0)
