"""profile=counters: perf stat's hardware counters of the training steps, or one line saying why not."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from segperf.callbacks import HardwareCounters
from segperf.perf import counters
from segperf.perf.counters import format_counters, parse_perf_stat, unavailable_reason
from segperf.perf.summary import format_run_summary

FIXTURES = Path(__file__).parent / "fixtures"


def test_perf_stat_csv_gives_cycles_instructions_ipc_and_cache_miss_rate():
    # a hybrid CPU: counts of cpu_core and cpu_atom add up; <not counted> / <not supported> lines drop out
    section = parse_perf_stat((FIXTURES / "perf_stat_hybrid.csv").read_text())
    assert section["available"] is True
    assert section["cycles"] == 41_327_418_822 + 2_684_105_123
    assert section["instructions"] == 86_792_779_450 + 3_221_304_877
    assert section["ipc"] == pytest.approx(90_014_084_327 / 44_011_523_945)
    assert (section["cache_references"], section["cache_misses"]) == (1_083_277_102, 312_845_019)
    assert section["miss_rate"] == pytest.approx(0.2888, abs=1e-4)
    assert section["multiplexed"] is True  # cpu_atom ran 87.5% of the time: perf scaled it up
    assert section["not_counted"] == {"topdown-retiring": "not supported"}
    rows = format_counters(section | {"seconds": 9.87})
    assert "2.05 insn per cycle" in rows[1] and "28.88% of all cache refs" in rows[3]


def test_a_machine_without_hardware_counters_gets_one_line_saying_so():
    # recorded on this project's VM: perf is installed, the hypervisor exposes no PMU
    section = parse_perf_stat((FIXTURES / "perf_stat_not_supported.csv").read_text())
    assert section["available"] is False and section["cycles"] is None and section["ipc"] is None
    assert "cycles <not supported>" in section["reason"]
    assert format_counters(section) == [f"n/a: {section['reason']}"]


def test_missing_perf_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    reason = unavailable_reason()
    assert reason.startswith("perf not found") and "apt install linux-perf" in reason


def test_a_paranoid_kernel_says_which_setting_forbids_it(monkeypatch, tmp_path):
    (tmp_path / "paranoid").write_text("3\n")
    monkeypatch.setattr(counters.os, "geteuid", lambda: 1000)
    reason = unavailable_reason(perf="/usr/bin/perf", paranoid_file=tmp_path / "paranoid")
    assert "kernel.perf_event_paranoid=3" in reason and "\n" not in reason


def test_without_perf_the_run_records_why_and_the_summary_shows_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    callback = HardwareCounters(tmp_path, skip_steps=0)
    rank0 = SimpleNamespace(is_global_zero=True)
    callback.on_train_batch_start(rank0, None, None, 0)  # the first step after warm-up
    section = callback.finish()
    assert section == {"available": False, "reason": unavailable_reason()}
    summary = format_run_summary({"counters": section})
    block = summary.split("Hardware counters (perf stat)")[1].split("=" * 10)[0]
    assert [line for line in block.splitlines() if line.strip("-")] == [f"n/a: {section['reason']}"]


def test_a_run_that_ends_in_warm_up_says_so():
    callback = HardwareCounters("/nonexistent", skip_steps=2)
    assert callback.finish() == {"available": False, "reason": "training ended before step 3 (warm-up)"}


def test_under_ddp_only_rank_0_runs_perf_stat(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(HardwareCounters, "_start", lambda self: started.append(self))
    callback = HardwareCounters(tmp_path, skip_steps=0)
    callback.on_train_batch_start(SimpleNamespace(is_global_zero=False), None, None, 0)
    assert not started and callback.finish() == {"available": False, "reason": "counted on rank 0 only"}
