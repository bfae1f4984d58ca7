"""Every run records how busy the machine was at its start and end, and which job of its process it
was, so that a slow run on a busy machine (or a sweep's first job) is not read as a slow setting."""

import os
import subprocess
import sys
import time

import pytest

from segperf.perf import machine_load
from segperf.perf.machine_load import cpu_clock, cpu_mhz, format_load, load_at_end, load_at_start, others_since
from segperf.perf.summary import format_run_summary
from segperf.training.record import RunRecord
from tests.conftest import compose_config


def test_cpu_clock_is_the_mean_of_the_cores_cpufreq_readings(tmp_path):
    for core, khz in enumerate((2_000_000, 3_000_000)):
        (tmp_path / f"cpu{core}").mkdir()
        (tmp_path / f"cpu{core}" / "scaling_cur_freq").write_text(f"{khz}\n")
    assert cpu_mhz(cpufreq=str(tmp_path / "cpu*" / "scaling_cur_freq"), cpuinfo="/nonexistent") == 2500.0


def test_cpu_clock_falls_back_to_cpuinfo_and_is_none_where_unreadable(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2445.400\nprocessor\t: 1\ncpu MHz\t\t: 2445.600\n")
    assert cpu_mhz(cpufreq=str(tmp_path / "none*"), cpuinfo=str(cpuinfo)) == 2445.5
    assert cpu_mhz(cpufreq=str(tmp_path / "none*"), cpuinfo=str(tmp_path / "missing")) is None


def test_load_is_recorded_at_start_and_end_with_the_cores_it_is_read_against(monkeypatch):
    readings = iter([(0.5, 0.4, 0.3), (2.25, 1.0, 0.5)])
    monkeypatch.setattr(os, "getloadavg", lambda: next(readings))
    monkeypatch.setattr(machine_load, "cpu_mhz", lambda: 2400.0)
    monkeypatch.setattr(machine_load, "others_since", lambda start: {"others_cores": 0.01, "steal_cores": 0.0})
    section = load_at_end(*load_at_start())
    assert section["loadavg_start"] == [0.5, 0.4, 0.3] and section["loadavg_end"] == [2.25, 1.0, 0.5]
    assert section["cpu_mhz_start"] == section["cpu_mhz_end"] == 2400.0
    assert section["cores"] == len(os.sched_getaffinity(0))
    assert format_load(section) == (
        f"1-min load 0.50 at start, 2.25 at end ({section['cores']} cores); other processes 0.01 cores during the "
        "run; CPU 2,400 -> 2,400 MHz"
    )


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass"


@pytest.mark.slow
@pytest.mark.serial  # a parallel test worker's changing load would read as the foreign process's
def test_other_processes_cpu_during_the_run_is_measured_and_this_process_trees_own_is_not():
    # whatever else this machine runs meanwhile (another test run, a neighbour) is the floor each
    # reading is compared with, so the test holds on a busy machine too
    start = cpu_clock()
    time.sleep(0.6)
    quiet = others_since(start)["others_cores"]
    start = cpu_clock()
    _spin(0.6)  # this process
    subprocess.run([sys.executable, "-c", SPIN.format(s=0.6)], check=True)  # a reaped child: ours too
    own = others_since(start)
    assert own["window_s"] >= 1.0 and own["others_cores"] < quiet + 0.3, (own, quiet)
    # a process outside the tree (its parent exits at once, so it is not our descendant): another's
    spawn = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {SPIN.format(s=1.5)!r}])"
    subprocess.run([sys.executable, "-c", spawn], check=True)
    start = cpu_clock()
    time.sleep(1.0)
    other = others_since(start)
    # about one core more, as far as the idle cores allow: a spinning process takes what was idle
    headroom = min(1.0, len(os.sched_getaffinity(0)) - quiet)
    assert other["others_cores"] > quiet + 0.5 * headroom, (other, quiet)
    assert others_since(None) == {"others_cores": None, "steal_cores": None, "window_s": None}


def test_no_load_average_reads_as_none_not_a_failure(monkeypatch):
    def unavailable():
        raise OSError("load average unobtainable")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    monkeypatch.setattr(machine_load, "cpu_clock", lambda: None)  # psutil could not read /proc/stat either
    section, start = load_at_start()
    assert section["loadavg_start"] is None and start is None
    assert load_at_end(section, start)["others_cores"] is None
    assert format_load(section).startswith(f"1-min load n/a at start, n/a at end ({section['cores']} cores)")


def test_summary_header_shows_the_load_under_the_machine():
    machine = {"cpu_model": "AMD EPYC", "cpu_cores": 2, "cpu_threads": 2, "cpu_available": 2, "ram_mib": 1, "gpus": []}
    load = {"loadavg_start": [1.5, 1, 1], "loadavg_end": [1.75, 1, 1], "cpu_mhz_start": None, "cpu_mhz_end": None}
    lines = format_run_summary({"machine": machine, "machine_load": {**load, "cores": 2}}).splitlines()
    assert lines[lines.index("Resources") + 5] == "Load      1-min load 1.50 at start, 1.75 at end (2 cores)"


def test_each_run_of_a_process_gets_the_next_process_job_number(tmp_path):
    cfg = compose_config(f"paths.output_dir={tmp_path}")
    first, second = (RunRecord(cfg, tmp_path / name).results["process_job"] for name in ("a", "b"))
    assert second == first + 1


def test_the_summary_line_names_vm_steal_only_when_there_is_some():
    load = {"loadavg_start": [0.1, 0, 0], "loadavg_end": [0.2, 0, 0], "cores": 2, "others_cores": 0.45}
    assert format_load(load | {"steal_cores": 0.004}).endswith("; other processes 0.45 cores during the run")
    assert format_load(load | {"steal_cores": 0.3}).endswith("during the run, VM steal 0.30")
