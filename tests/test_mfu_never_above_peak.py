"""No MFU above 100%: a run that beats its peak probe gets MFU n/a with the reason, in results.json,
summary.txt, report.md and report.json; and the probe measures the work a training step does
(convolutions as well as matmuls, every dtype the run's precision computes in)."""

import json

import pytest
import torch

from segperf.perf import peak as peak_module
from segperf.perf.flops import mfu_or_reason
from segperf.perf.peak import PeakReading, conv_peak, kernel_peak, usable_dtypes
from segperf.report import build_report
from segperf.report.export import write_report_json
from segperf.report.sweep import load_sweep

SLOW_PEAK = 1e3  # FLOP/s: any real run beats it


@pytest.fixture(scope="module")
def beaten_run(tmp_path_factory, tiny_carvana):
    from segperf.training.run import train
    from tests.conftest import NARROW_UNET, TINY, compose_config

    run_dir = tmp_path_factory.mktemp("beaten")
    cfg = compose_config(*TINY, *NARROW_UNET, f"data.root={tiny_carvana}", "perf.peak_probe=true")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEGPERF_CACHE", str(tmp_path_factory.mktemp("cache")))
        patch.setattr(peak_module, "kernel_peak", lambda device, dtype: PeakReading(SLOW_PEAK, "a slow fake", 0.0))
        train(cfg, run_dir)
    return run_dir


def test_a_run_that_beats_its_peak_probe_records_no_mfu_but_the_reason(beaten_run):
    throughput = json.loads((beaten_run / "results.json").read_text())["throughput"]
    assert throughput["achieved_train_flops_per_s"] > SLOW_PEAK
    assert throughput["measured_mfu"] is None
    reason = throughput["measured_mfu_reason"]
    assert reason.startswith("the peak probe was not representative: the run achieved ")
    assert reason.endswith("> peak probe 0.0 GFLOP/s")
    summary = (beaten_run / "summary.txt").read_text()
    assert f"MFU (measured peak)     n/a ({reason})" in summary


def test_the_report_of_a_run_that_beat_its_probe_shows_mfu_na_and_why(beaten_run, tmp_path):
    sweep = load_sweep(beaten_run)
    report = build_report(sweep, tmp_path, charts_too=False).read_text()
    assert "| n/a (probe beaten) |" in report
    assert "MFU n/a, the peak probe was not representative: the run achieved" in report
    mfu = json.loads(write_report_json(sweep, tmp_path).read_text())["configurations"][0]["measured_mfu"]
    assert mfu["median"] is None and mfu["runs_beaten"] == 1
    assert mfu["not_available"][0].startswith("the peak probe was not representative")


def test_an_mfu_over_one_from_an_older_results_json_is_not_shown_either(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    results = {"status": "completed", "train": {"images_per_s": 2.0}, "throughput": {"measured_mfu": 1.126}}
    (run / "results.json").write_text(json.dumps(results))
    report = build_report(load_sweep(run), tmp_path / "out", charts_too=False).read_text()
    assert "112.6%" not in report.split("## Training", 1)[1].split("\n\n", 1)[0].replace("of it", "")
    assert "| n/a (probe beaten) |" in report


@pytest.mark.parametrize("peak_name", ["peak probe", "spec-sheet peak"])
def test_mfu_is_a_fraction_of_its_peak_or_none_with_why(peak_name):
    assert mfu_or_reason(5e10, 1e11, peak_name) == (0.5, None)
    assert mfu_or_reason(1e11, 1e11, peak_name) == (1.0, None)
    value, reason = mfu_or_reason(2.5e12, 2e12, peak_name)
    assert value is None
    assert reason == f"the {peak_name} was not representative: the run achieved 2.5 TFLOP/s > {peak_name} 2.0 TFLOP/s"
    assert mfu_or_reason(None, 1e11, peak_name) == (None, None)
    assert mfu_or_reason(5e10, None, peak_name) == (None, None)


def test_a_mixed_precision_run_is_probed_in_its_dtype_and_in_float32():
    assert usable_dtypes("bf16-mixed") == [torch.bfloat16, torch.float32]
    assert usable_dtypes("16-mixed") == [torch.float16, torch.float32]
    assert usable_dtypes("bf16-true") == [torch.bfloat16]
    assert usable_dtypes("32-true") == [torch.float32]


def test_the_conv_probe_counts_forward_and_backward_flops_of_a_3x3_convolution():
    ticks = iter(range(10_000))
    clock = lambda: next(ticks) * 0.05  # noqa: E731 - every clock read is 50 ms later: each call "takes" 50 ms
    reading = conv_peak(torch.device("cpu"), torch.float32, seconds=0.2, clock=clock)
    batch, channels = peak_module.CONV_SHAPE["cpu"]
    side = peak_module.CONV_SIDES["cpu"][0]  # 50 ms is a long call: no need to grow
    assert reading.kernel == "conv2d"
    assert reading.flops_per_s == pytest.approx(3 * 2 * batch * channels * side * side * channels * 9 / 0.05)
    assert reading.method.startswith(f"conv2d 3x3 forward+backward {batch}x{channels}x{side}x{side} channels_last")


def test_the_peak_is_the_best_of_matmul_and_convolutions_and_names_both(monkeypatch):
    monkeypatch.setattr(peak_module, "matmul_peak", lambda d, t, s: PeakReading(1e10, "matmul fake", 0.1, "matmul"))
    rates = iter([3e10, 2e10])
    monkeypatch.setattr(
        peak_module, "conv_peak", lambda d, t, s, memory_format: PeakReading(next(rates), "conv fake", 0.3, "conv2d")
    )
    reading = kernel_peak(torch.device("cpu"), torch.bfloat16)
    assert reading.flops_per_s == 3e10 and reading.kernel == "conv2d"
    assert reading.method == "conv fake (best of: matmul 10.0 GFLOP/s; conv2d channels_last 20.0 GFLOP/s)"
    assert reading.other_cores_busy == 0.3  # the busiest kernel's machine decides whether it is cached
