"""Timing discipline across machines: every run records what makes its timings comparable (host, CPU, GPUs, NVIDIA
driver, CUDA/cuDNN, library versions), and the report refuses speed-ups across machines that differ unless told."""

from __future__ import annotations

import sys

from segperf.perf.machine import LIBRARIES, machine_info, nvidia_driver
from segperf.report import build_report, main
from segperf.report.comparability import describe_machine, differences
from segperf.report.sweep import load_sweep
from tests.fake_nvml import FakeNvml
from tests.test_report import make_results, table_rows, write_sweep

VERSIONS = {"python": "3.11.7", "torch": "2.13.0", "lightning": "2.6.6", "numpy": "2.4.6"}


def gpu_machine(host: str = "node1", driver: str = "570.124.06", **versions: str) -> dict:
    return {
        "hostname": host,
        "cpu_model": "Test CPU",
        "cpu_cores": 16,
        "cpu_threads": 32,
        "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771, "index": 0}],
        "gpu_count": 1,
        "nvidia_driver": driver,
        "cuda": "12.8",
        "cudnn": 91002,
        "torch": "2.13.0",
        "versions": VERSIONS | versions,
    }


def test_machine_info_records_host_devices_and_library_versions():
    info = machine_info()
    assert info["hostname"] and info["cpu_model"] and info["ram_mib"] > 0
    assert info["gpu_count"] == len(info["gpus"]) == 0  # CPU-only test machine
    assert info["nvidia_driver"] is None and info["cuda"] is None  # the CPU build of torch
    assert set(info["versions"]) == {"python", *LIBRARIES}
    assert all(info["versions"][name] for name in ("python", "torch", "lightning", "hydra-core", "numpy"))


def test_nvidia_driver_comes_from_nvml_and_is_none_without_it(monkeypatch):
    fake = FakeNvml()
    fake.nvmlSystemGetDriverVersion = lambda: "570.124.06"
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvidia_driver() == "570.124.06"
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(missing=True))  # no driver: nvmlInit fails
    assert nvidia_driver() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert nvidia_driver() is None


def test_differences_name_each_field_that_differs_and_ignore_unrecorded_ones():
    a, b = gpu_machine(), gpu_machine(host="node2", driver="550.54.15", numpy="2.3.0")
    assert differences([a, b]) == {
        "host": ["node1", "node2"],
        "NVIDIA driver": ["570.124.06", "550.54.15"],
        "numpy": ["2.4.6", "2.3.0"],
    }
    assert differences([a, gpu_machine(), None, {}]) == {}  # a run that recorded nothing is unknown, not different
    line = describe_machine(b, extra=("host", "numpy"))
    expected = "node2: Test CPU (16 cores, 32 threads), NVIDIA H200 140 GiB, torch 2.13.0, NVIDIA driver 550.54.15"
    assert line == expected + ", CUDA 12.8, numpy 2.3.0"


def mixed_sweep(tmp_path):
    jobs = {
        "0_workers=off": make_results(2.0, machine=gpu_machine()),
        "1_workers=auto": make_results(4.0, workers=2, machine=gpu_machine(driver="550.54.15")),
    }
    return write_sweep(tmp_path / "sweep", jobs)


def test_report_on_machines_that_differ_warns_first_and_computes_no_speedup(tmp_path):
    report = build_report(load_sweep(mixed_sweep(tmp_path)), tmp_path, charts_too=False).read_text()
    opening = report.split("## Machine", 1)[0]
    assert "⚠ Not comparable" in opening and "NVIDIA driver (570.124.06, 550.54.15)" in opening
    assert "host" not in opening.split("differ in", 1)[1].split(".**")[0]  # only what differs is named
    rows = table_rows(report, "## Training")
    assert [row[3] for row in rows.values()] == ["n/a", "n/a"]
    assert "Speed-up: not computed" in report
    # both machines are listed, told apart by their driver
    assert "**M1** node1:" in report and "NVIDIA driver 550.54.15, CUDA 12.8 (jobs 1)" in report


def test_allow_mixed_machines_computes_speedups_and_keeps_the_warning(tmp_path, capsys):
    sweep_dir = mixed_sweep(tmp_path)
    assert main([str(sweep_dir), "--allow-mixed-machines", "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "⚠ Not comparable" in report and "computed across machines anyway" in report
    speedups = [row[3] for row in table_rows(report, "## Training").values()]
    assert speedups == ["baseline", "2.00× (unconfirmed)"]  # one run each: shown, not stated as fact


def test_report_of_one_machine_has_no_warning_and_keeps_speedups(tmp_path):
    jobs = {
        "0_workers=off": make_results(2.0, machine=gpu_machine()),
        "1_workers=auto": make_results(4.0, workers=2, machine=gpu_machine()),
    }
    report = build_report(load_sweep(write_sweep(tmp_path / "sweep", jobs)), tmp_path, charts_too=False).read_text()
    assert "Not comparable" not in report and "MIXED MACHINES" not in report
    speedups = [row[3] for row in table_rows(report, "## Training").values()]
    assert speedups == ["baseline", "2.00× (unconfirmed)"]  # one run each: shown, not stated as fact
