"""The report shows each configuration's peak memory, and a faster configuration that needs twice
the baseline's memory says so, in segperf.compare's words; all from made-up results.json files."""

from __future__ import annotations

import json

from segperf.perf.memory_trend import MIB
from segperf.report import build_report
from segperf.report.sweep import load_sweep
from tests.test_report import make_results, table_rows, write_sweep


def _memory(host_peak: int, creep: dict | None = None) -> dict:
    """results.json's `memory` as MemoryWatch writes it, cut to what the report reads."""
    creep = creep or {"state": "none", "host_bytes_per_step": None, "device_bytes_per_step": None}
    return {"pressure": {"host": {"peak_bytes": host_peak}, "device": None}, "creep": creep}


def _sweep(tmp_path):
    leak = {"state": "confirmed", "host_bytes_per_step": 3 * MIB, "device_bytes_per_step": None}
    jobs = {
        "0_workers=0": make_results(2.0, memory=_memory(600 * MIB)),
        "1_workers=2": make_results(4.0, workers=2, memory=_memory(1536 * MIB)),  # 2x faster, 2.56x the memory
        "2_workers=4": make_results(1.9, workers=4, memory=_memory(900 * MIB, leak)),  # slower, 1.5x, creeps
        # a run from before MemoryWatch: the resource sampler's peak RSS stands in
        "3_workers=8": make_results(2.1, workers=8, resources={"cpu_mean_percent": 100.0, "rss_peak_bytes": 630 * MIB}),
    }
    return load_sweep(write_sweep(tmp_path / "sweep", jobs))


def test_report_shows_peak_memory_per_configuration_and_a_faster_one_that_needs_twice_the_memory(tmp_path):
    report = build_report(_sweep(tmp_path), tmp_path / "out", charts_too=False).read_text()
    rows = table_rows(report, "## Memory")
    assert rows["workers=0"][1:3] == ["600.0 MiB", "1.00×"]
    assert rows["workers=2"][1:3] == ["1.5 GiB", "2.56×"]
    assert rows["workers=8"][1:3] == ["630.0 MiB", "1.05×"]
    assert rows["workers=0"][3:5] == rows["workers=2"][3:5] == ["n/a", "n/a"]  # no device memory on a CPU run
    assert rows["workers=4"][5].startswith("**1 of 1 runs** (host +3.0 MiB a step")
    assert rows["workers=2"][5] == "none" and rows["workers=8"][5] == "n/a"  # not judged: no MemoryWatch
    assert "- `workers=2` is faster but needs 2.6x `workers=0`'s peak host memory (1.5 GiB vs 600.0 MiB)." in report
    # 1.5x and slower: named, without "faster"; 1.05x: not named
    assert "- `workers=4` needs 1.5x `workers=0`'s peak host memory (900.0 MiB vs 600.0 MiB)." in report
    assert "`workers=8` needs" not in report


def test_report_json_holds_each_configurations_memory(tmp_path):
    build_report(_sweep(tmp_path), tmp_path / "out", charts_too=False)
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    memory = {c["label"]: c["memory"] for c in data["configurations"]}
    assert memory["workers=0"]["peak_bytes"] == {"host": 600 * MIB, "device": None}
    assert memory["workers=0"]["peak_ratio"] is None and memory["workers=0"]["text"] is None  # the baseline
    assert memory["workers=2"]["peak_ratio"] == {"host": 1536 / 600}
    assert memory["workers=2"]["text"] == (
        "workers=2 is faster but needs 2.6x workers=0's peak host memory (1.5 GiB vs 600.0 MiB)"
    )
    assert memory["workers=4"]["creep"] == {
        "judged_runs": 1,
        "creeping_runs": 1,
        "host_bytes_per_step": 3 * MIB,
        "device_bytes_per_step": None,
    }


def test_a_sweep_without_memory_records_has_no_memory_section(tmp_path):
    jobs = {"0_workers=0": make_results(2.0), "1_workers=2": make_results(4.0, workers=2)}
    report = build_report(load_sweep(write_sweep(tmp_path / "sweep", jobs)), tmp_path / "out", charts_too=False)
    assert "## Memory" not in report.read_text()
