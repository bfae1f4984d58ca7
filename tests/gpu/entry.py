"""`python -m segperf.train` for the GPU check's rehearsal on a CPU, with a stand-in NVML:
`python -m tests.gpu.entry [overrides]` (tests/gpu/sweep.py runs it).

With SEGPERF_FAKE_NVML=1 the run's resource sampler samples a "GPU 0" through tests/fake_nvml.py's
FakeNvml, fed with a driver sample every 20 ms of wall time (utilization cycling 40-80%), also
where torch sees no GPU: the rehearsal then goes through the NVML columns of results.json and the
check's reading of them. It does so by replacing `ResourceSampler` in segperf.callbacks.resource_monitor's
namespace for this process only; nothing in src/ knows about it. Without the variable this is
exactly `python -m segperf.train` (the GPU check itself runs that).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def install_fake_nvml() -> None:
    sys.path.insert(0, str(REPO))  # tests/ is a package beside src/
    import segperf.callbacks.resource_monitor as measure
    from segperf.perf.sampler import ResourceSampler
    from tests.fake_nvml import FakeNvml

    class DriverSamples(FakeNvml):
        """A driver that takes a utilization sample every `period_us`, as NVML's does."""

        period_us = 20_000

        def nvmlDeviceGetSamples(self, handle, sampling_type: int, last_seen: int):
            now = int(time.time() * 1e6)
            t = self.buffer[-1].timeStamp if self.buffer else now - self.period_us
            while t + self.period_us <= now:
                t += self.period_us
                self.push(t, 40 + (t // self.period_us) % 41)
            del self.buffer[:-64]  # the driver's ring buffer is short too
            return super().nvmlDeviceGetSamples(handle, sampling_type, last_seen)

    class FakeGpuSampler(ResourceSampler):
        def __init__(self, interval_s: float = 0.05, gpu_index=None, nvml=None, children_refresh_s: float = 0.5):
            gpu_index = 0 if gpu_index is None else gpu_index
            super().__init__(interval_s, gpu_index, nvml or DriverSamples(), children_refresh_s)

    if getattr(measure, "ResourceSampler", None) is not ResourceSampler:
        raise SystemExit("tests.gpu.entry: segperf.callbacks.resource_monitor no longer samples with ResourceSampler")
    measure.ResourceSampler = FakeGpuSampler
    print("tests.gpu.entry: SEGPERF_FAKE_NVML=1: GPU utilization and memory come from a fake NVML", flush=True)


if __name__ == "__main__":
    from segperf.command_line import set_up_command

    set_up_command()  # as `python -m segperf.train` does, before the fake NVML imports torch
    if os.environ.get("SEGPERF_FAKE_NVML") == "1":
        install_fake_nvml()
    from segperf.train import cli

    cli()
