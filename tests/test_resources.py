"""The resource sampler: process-tree CPU and RSS with real child processes, window cutting with hand-made samples,
the GPU columns with a fake NVML (tests/fake_nvml.py), and the machine header."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from segperf.perf.device_memory import torch_memory
from segperf.perf.formatting import format_mib, format_percent_of_cores, format_usage
from segperf.perf.machine import format_header, machine_info
from segperf.perf.nvml import NvmlGpu
from segperf.perf.sampler import ResourceSample, ResourceSampler
from tests.fake_nvml import FakeNvml, NVMLError_NotSupported

MIB = 2**20
BUSY = "import time\nend = time.perf_counter() + {s}\nwhile time.perf_counter() < end: pass\nprint(time.process_time())"
HOLD = "import sys\nb = b'x' * ({mib} << 20)\nprint('ready', flush=True)\nsys.stdin.read()"


def python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kw)


def idle_sampler(nvml=None, gpu_index=None) -> ResourceSampler:
    """Started, but its thread waits an hour: the test takes every sample itself with sample_once()."""
    return ResourceSampler(interval_s=3600, gpu_index=gpu_index, nvml=nvml).start()


@pytest.mark.slow  # a child that spins for a second; test_tree_rss_includes_a_child_holding_memory stays fast
def test_tree_cpu_includes_child_processes():
    with ResourceSampler(interval_s=0.05, children_refresh_s=0.1) as sampler:
        time.sleep(0.3)
        idle = sampler.window((0, time.perf_counter())).cpu_mean_percent
        t0 = time.perf_counter()
        children = [python(BUSY.format(s=1.2)) for _ in range(2)]
        child_cpu_s = sum(float(c.communicate()[0]) for c in children)  # what the children say they used
        t1 = time.perf_counter()
        time.sleep(0.06)
    busy = sampler.window((t0, t1))
    sampled_s = busy.cpu_mean_percent / 100 * (t1 - t0)
    print(
        f"idle {idle:.0f}%, busy children {busy.cpu_mean_percent:.0f}% = {sampled_s:.2f} s (they say {child_cpu_s:.2f})"
    )
    assert idle < 50
    assert sampled_s > 0.8 * child_cpu_s  # all of the children's CPU shows up, less the last tick before each exits
    # ... as the workers' share (the descendants'), which was nothing before they started
    assert busy.workers_cpu_mean_percent / 100 * (t1 - t0) > 0.8 * child_cpu_s
    assert sampler.window((0, t0)).workers_cpu_mean_percent < 5
    if child_cpu_s / (t1 - t0) > 1.5:  # the 2 cores were ours (other jobs on this machine can take one)
        assert busy.cpu_mean_percent > 120
    assert sampler.notes == []


def test_tree_rss_includes_a_child_holding_memory():
    with ResourceSampler(interval_s=0.05, children_refresh_s=0.1) as sampler:
        time.sleep(0.15)
        before = sampler.window((0, time.perf_counter())).rss_peak_bytes
        child = python(HOLD.format(mib=200), stdin=subprocess.PIPE)
        assert child.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        time.sleep(0.3)  # > children_refresh_s + interval_s
        t1 = time.perf_counter()
        child.communicate("")
        time.sleep(0.2)
        t2 = time.perf_counter()
    held = sampler.window((t0, t1)).rss_peak_bytes
    print(f"tree RSS {before / MIB:.0f} MiB, with the child {held / MIB:.0f} MiB")
    assert held - before > 190 * MIB
    assert sampler.window((t2 - 0.1, t2)).rss_peak_bytes - before < 100 * MIB  # the exited child left the tree
    assert sampler.notes == []


def test_window_picks_samples_inside_and_nearest_when_empty():
    sampler = ResourceSampler()
    assert sampler.window((0, 1)).samples == 0 and sampler.overall().cpu_mean_percent is None
    sampler.samples = [ResourceSample(float(t), 10.0 * t, t * MIB, 10.0 * t, t) for t in range(11)]
    stats = sampler.window((2.0, 4.0))
    assert (stats.samples, stats.cpu_mean_percent, stats.rss_peak_bytes, stats.nearest) == (3, 30.0, 4 * MIB, False)
    assert (stats.gpu_util_p50, stats.gpu_util_max, stats.gpu_mem_peak_bytes) == (30.0, 40.0, 4)
    short = sampler.window((4.2, 4.3))  # shorter than the interval: the sample at 5.0 covers (4.0, 5.0]
    assert (short.samples, short.cpu_mean_percent, short.nearest) == (1, 50.0, True)
    assert sampler.window((20, 21)).cpu_mean_percent == 100.0  # after the last sample: the last one
    overall = sampler.overall()
    assert (overall.samples, overall.gpu_util_p50, overall.gpu_util_p90, overall.gpu_util_max) == (11, 50, 90, 100)


def test_fake_nvml_samples_drive_gpu_columns():
    fake = FakeNvml()
    fake.push(100, 99)  # driver history from before the sampler started: dropped
    sampler = idle_sampler(fake, gpu_index=0)
    t0 = time.perf_counter()
    for values, mem_mib in [([10, 20], 5000), ([40], 6070), ([], 5500), ([100], 4000)]:
        for v in values:
            fake.push(fake.buffer[-1].timeStamp + 100_000, v)
        fake.mem_used = mem_mib * MIB
        sampler.sample_once()
    t1 = time.perf_counter()
    sampler.stop()
    stats = sampler.window((t0, t1))
    # per tick: mean of the new samples (15), 40, nothing new -> latest value kept (40), 100
    assert [s.gpu_util_percent for s in sampler.samples[:4]] == [15, 40, 40, 100]
    assert (stats.gpu_util_p50, stats.gpu_util_p90, stats.gpu_util_max) == (40, pytest.approx(82), 100)
    assert stats.gpu_util_mean_percent == pytest.approx(48.75)
    assert stats.gpu_mem_peak_bytes == 6070 * MIB
    assert fake.seen_args == [0, 100, 200_100, 300_100, 300_100, 400_100]  # each call asks only for newer samples
    assert sampler.notes == [] and fake.calls[-1] == "nvmlShutdown"


def test_get_samples_not_supported_falls_back_to_utilization_rates_once():
    fake = FakeNvml(samples_error=NVMLError_NotSupported, rates_util=37)
    sampler = idle_sampler(fake, gpu_index=0)
    samples = [sampler.sample_once() for _ in range(3)]
    sampler.stop()
    assert [s.gpu_util_percent for s in samples] == [37, 37, 37]
    assert fake.calls.count("nvmlDeviceGetSamples") == 1
    assert len(sampler.notes) == 1 and "nvmlDeviceGetUtilizationRates" in sampler.notes[0]


def test_get_samples_that_never_returns_a_sample_falls_back():
    fake = FakeNvml(rates_util=12)  # empty driver buffer: NVMLError_NotFound on every call
    sampler = idle_sampler(fake, gpu_index=0)
    utils = [sampler.sample_once().gpu_util_percent for _ in range(NvmlGpu.NOT_FOUND_LIMIT + 1)]
    sampler.stop()
    assert utils[0] is None and utils[-1] == 12
    assert len(sampler.notes) == 1 and "never returned a sample" in sampler.notes[0]


@pytest.mark.parametrize("how", ["library", "import", "nothing supported"])
def test_nvml_unavailable_gives_none_and_one_note(how, monkeypatch):
    fake = None
    if how == "library":
        fake = FakeNvml(missing=True)
    elif how == "import":
        monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    else:
        fake = FakeNvml(samples_error=NVMLError_NotSupported, rates_supported=False, mem_supported=False)
    with ResourceSampler(interval_s=3600, gpu_index=0, nvml=fake) as sampler:
        sample = sampler.sample_once()
    assert (sample.gpu_util_percent, sample.gpu_mem_bytes) == (None, None)
    assert sample.cpu_percent is not None and sample.rss_bytes > 0
    assert sampler.overall().gpu_util_p50 is None and sampler.overall().gpu_mem_peak_bytes is None
    assert len(sampler.notes) == 1 and sampler.notes[0].startswith("GPU: n/a (NVML not available: ")
    print(sampler.notes[0])


def test_no_gpu_index_never_touches_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with ResourceSampler(interval_s=3600, nvml=fake) as sampler:
        sample = sampler.sample_once()
    assert fake.calls == [] and sampler.notes == [] and sample.gpu_util_percent is None


def test_default_nvml_is_imported_lazily(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with ResourceSampler(interval_s=3600, gpu_index=0) as sampler:
        assert sampler.sample_once().gpu_mem_bytes == 1 << 30
    assert fake.calls[0] == "nvmlInit"


def test_a_failing_field_stops_with_a_note_and_the_rest_goes_on(monkeypatch):
    fake = FakeNvml()
    sampler = idle_sampler(fake, gpu_index=0)
    fake.mem_error = RuntimeError("GPU is lost")
    monkeypatch.setattr(sampler, "_read_tree", lambda t: 1 / 0)
    first, second = sampler.sample_once(), sampler.sample_once()
    sampler.stop()
    assert first.gpu_mem_bytes is None and first.cpu_percent is None and second.rss_bytes is None
    assert sorted(n.split(":")[0] for n in sampler.notes) == ["mem", "tree"]
    assert fake.calls.count("nvmlDeviceGetMemoryInfo") == 2  # the capability probe and the failed read, no retries


def test_start_stop_idempotent():
    sampler = ResourceSampler(interval_s=0.01)
    sampler.stop()  # never started: nothing to do
    with sampler:
        time.sleep(0.05)
    n = len(sampler.samples)
    sampler.stop()
    assert n >= 3 and len(sampler.samples) == n and not sampler._thread.is_alive()


@pytest.mark.slow  # samples for a second and more
def test_overhead_at_50ms_is_small():
    with ResourceSampler(interval_s=0.05) as sampler:
        time.sleep(1.5)
    overhead = sampler.overhead_fraction()
    print(f"sampler overhead at 50 ms: {overhead:.2%} of one core ({len(sampler.samples)} samples)")
    assert len(sampler.samples) >= 20
    assert overhead < 0.05


def test_torch_memory_is_none_off_cuda():
    assert torch_memory("cpu") == {"peak_allocated_bytes": None, "peak_reserved_bytes": None}


def test_machine_info_and_header():
    info = machine_info()
    keys = "cpu_model cpu_cores cpu_threads cpu_available ram_mib gpus torch python hostname platform".split()
    keys += "gpu_count nvidia_driver cuda cudnn versions".split()  # what makes timings comparable across machines
    assert sorted(info) == sorted(keys)
    assert 1 <= info["cpu_available"] <= info["cpu_threads"] and info["cpu_cores"] <= info["cpu_threads"]
    header = format_header(info)
    print(header)
    lines = header.splitlines()
    assert lines[0].startswith("CPU       ") and "available to this run" in lines[0]
    assert lines[1] == f"RAM       {info['ram_mib']:,} MiB"
    assert lines[2] == "GPU       n/a"  # no GPU on the test machine
    h200 = {**info, "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771, "index": 0}]}
    assert format_header(h200).splitlines()[2] == "GPU       NVIDIA H200 (143,771 MiB)"


def test_formats():
    assert format_percent_of_cores(126, 12) == "126% of 1,200% (1.3 of 12 cores busy)"
    assert format_percent_of_cores(None, 12) == "n/a"
    assert format_mib(1896 * MIB) == "1,896 MiB" and format_mib(None) == "n/a"
    assert format_usage(6070 * MIB, 6144 * MIB) == "6,070 / 6,144 MiB (99%)"
    assert format_usage(6070 * MIB, None) == "6,070 MiB" and format_usage(None, 6144 * MIB) == "n/a"  # total unknown


def test_the_summary_shows_the_workers_cpu_while_training_only_when_they_worked():
    from segperf.perf.summary import format_run_summary

    machine = {"cpu_model": "AMD EPYC", "cpu_cores": 2, "cpu_threads": 2, "cpu_available": 2, "ram_mib": 1, "gpus": []}
    busy = format_run_summary({"machine": machine, "resources": {"workers_cpu_training_percent": 94.0}})
    assert "Workers CPU (training)  94% of 200% (0.9 of 2 cores busy)" in busy
    for idle in (0.2, None):
        summary = format_run_summary({"machine": machine, "resources": {"workers_cpu_training_percent": idle}})
        assert "Workers CPU" not in summary
