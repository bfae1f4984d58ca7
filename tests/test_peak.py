"""MFU on every device: the achievable peak is measured once per machine and precision, cached in
segperf's cache folder, and reused; a corrupt cache or a reading from a busy machine is not."""

import json

import pytest
import torch

from segperf.perf import peak as peak_module
from segperf.perf.peak import PeakReading, fingerprint, matmul_peak, measured_peak


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path))
    return tmp_path / "peak_flops.json"


class CountingProbe:
    """Stands in for the matmul probe: a known FLOP/s per dtype, and how often it was asked."""

    def __init__(self, busy: float = 0.0):
        self.calls: list[tuple[str, torch.dtype]] = []
        self.busy = busy

    def __call__(self, device, dtype):
        self.calls.append((device.type, dtype))
        rate = {torch.float32: 1e11, torch.bfloat16: 3e11}.get(dtype, 5e10)
        return PeakReading(rate, f"fake {dtype}", self.busy)


def test_the_peak_is_measured_once_then_read_from_the_cache(cache):
    probe = CountingProbe()
    first = measured_peak("cpu", "32-true", probe=probe)
    again = measured_peak("cpu", "32-true", probe=probe)
    assert len(probe.calls) == 1
    assert first["cached"] is False and again["cached"] is True
    assert first["flops_per_s"] == again["flops_per_s"] == 1e11
    assert again["source"] == "measured" and again["method"] == "fake torch.float32"
    assert cache.is_file()


def test_each_precision_and_device_has_its_own_peak(cache, monkeypatch):
    probe = CountingProbe()
    fp32 = measured_peak("cpu", "32-true", probe=probe)
    bf16 = measured_peak("cpu", "bf16-mixed", probe=probe)
    monkeypatch.setattr(peak_module, "device_name", lambda device: "NVIDIA H200" if device.type == "cuda" else "cpu")
    gpu = measured_peak("cuda:0", "bf16-mixed", probe=probe)
    # a mixed precision's float32 ops are the run's too: its peak is the better of both dtypes
    assert probe.calls == [
        ("cpu", torch.float32),
        ("cpu", torch.bfloat16),
        ("cpu", torch.float32),
        ("cuda", torch.bfloat16),
        ("cuda", torch.float32),
    ]
    assert (fp32["flops_per_s"], bf16["flops_per_s"]) == (1e11, 3e11)
    assert not gpu["cached"]
    keys = [json.loads(key) for key in json.loads(cache.read_text())]
    assert sorted((k["device"], k["precision"]) for k in keys) == [
        ("NVIDIA H200", "bf16-mixed"),
        ("cpu", "32-true"),
        ("cpu", "bf16-mixed"),
    ]
    assert measured_peak("cpu", "bf16-mixed", probe=probe)["cached"] and len(probe.calls) == 5


def test_the_key_names_what_the_peak_depends_on():
    key = fingerprint("cpu", "32-true")
    assert {"cpu_model", "cores", "torch", "device", "precision", "threads", "kernels"} <= key.keys()
    assert key["torch"] == torch.__version__ and key["device"] == "cpu"


def test_a_corrupt_cache_is_ignored_and_rewritten_atomically(cache, monkeypatch):
    cache.write_text('{"truncated": ')
    writes = []
    real_write = peak_module.write_json_atomic
    monkeypatch.setattr(
        peak_module, "write_json_atomic", lambda path, data: writes.append(path) or real_write(path, data)
    )
    probe = CountingProbe()
    assert measured_peak("cpu", "32-true", probe=probe)["cached"] is False
    assert writes == [cache] and len(json.loads(cache.read_text())) == 1
    assert sorted(p.name for p in cache.parent.iterdir()) == ["peak_flops.json"]  # no temporary file left
    entry = next(iter(json.loads(cache.read_text()).values()))
    entry["flops_per_s"] = "fast"  # an entry that is not a rate is measured again, too
    cache.write_text(json.dumps({json.dumps(fingerprint("cpu", "32-true"), sort_keys=True): entry}))
    assert measured_peak("cpu", "32-true", probe=probe)["flops_per_s"] == 1e11 and len(probe.calls) == 2


def test_a_probe_on_a_busy_machine_is_used_but_not_cached(cache):
    busy = CountingProbe(busy=1.5)  # other processes kept 1.5 cores busy while it ran
    reading = measured_peak("cpu", "32-true", probe=busy)
    assert reading["flops_per_s"] == 1e11 and reading["other_cores_busy"] == 1.5
    assert reading["not_cached"] == "1.5 cores busy with other work"
    assert measured_peak("cpu", "32-true", probe=busy)["cached"] is False and len(busy.calls) == 2
    assert not cache.exists()


def test_the_matmul_probe_reports_the_best_rounds_flops_of_an_n_by_n_product():
    ticks = iter(range(10_000))
    clock = lambda: next(ticks) * 0.05  # noqa: E731 - every clock read is 50 ms later: each product "takes" 50 ms
    reading = matmul_peak(torch.device("cpu"), torch.float32, seconds=0.2, clock=clock)
    n = peak_module.SIZES["cpu"][0]  # 50 ms is a long product: no need to grow
    assert reading.flops_per_s == pytest.approx(2 * n**3 / 0.05)
    assert reading.method.startswith(f"torch.matmul {n}x{n} float32 on cpu")
    assert reading.other_cores_busy is not None and reading.other_cores_busy >= 0


def test_a_cache_folder_that_cannot_be_written_costs_the_reuse_not_the_reading(tmp_path, monkeypatch):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("SEGPERF_CACHE", str(blocked))
    reading = measured_peak("cpu", "32-true", probe=CountingProbe())
    assert reading["flops_per_s"] == 1e11 and reading["cached"] is False and "not written" in reading["not_cached"]
