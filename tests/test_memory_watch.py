"""MemoryWatch: memory creep caught while the run lives (rate, since when, the out-of-memory step
and its warning before fit ends), no false alarm on a run that only fills, a bounded record,
pressure from torch.cuda's counters and NVML (faked), one leaking DDP rank named."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from segperf import PerfMonitor
from segperf.callbacks.memory_watch import MemoryWatch
from segperf.perf.host_memory import HeapHoles
from segperf.perf.memory_trend import MIB, Trend, rank_memory
from segperf.perf.nvml import NvmlGpu
from segperf.perf.summary import format_run_summary
from tests.conftest import MNIST_TINY, NARROW_UNET, TINY, run_cli
from tests.fake_nvml import FakeNvml

SCRIPT = Path(__file__).parent / "fixtures" / "leak_script.py"
_spec = importlib.util.spec_from_file_location("leak_script", SCRIPT)
leak_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(leak_script)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _FitEnd(L.Callback):
    """When fit ended, by the wall clock the log records carry."""

    def on_fit_end(self, trainer, pl_module) -> None:
        self.at = time.time()


def fit_with_watch(tmp_path: Path, leak_bytes: int, steps: int = 300):
    data = TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
    monitor, fit_end, caught = PerfMonitor(peak_probe=False), _FitEnd(), _Warnings()
    # beside PerfMonitor until PerfMonitor holds its own (then that one, or two would warn)
    watch = monitor.memory if integrated() else MemoryWatch()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path),
        accelerator="cpu",
        max_steps=steps,
        val_check_interval=50,
        check_val_every_n_epoch=None,
        limit_val_batches=2,
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[monitor, fit_end] if integrated() else [monitor, watch, fit_end],
    )
    logger = logging.getLogger("segperf")
    logger.addHandler(caught)
    try:
        trainer.fit(leak_script.Model(leak_bytes, -1), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    finally:
        logger.removeHandler(caught)
    results: dict = {"verdict": {"kind": "compute-bound", "text": "compute-bound on the CPU"}}
    watch.record(results)
    creep_warnings = [r for r in caught.records if "memory creep" in r.getMessage()]
    return results, creep_warnings, fit_end.at, tmp_path


def test_a_leak_of_a_fixed_size_a_step_is_measured_forecast_and_warned_before_fit_ends(tmp_path):
    results, warned, fit_end, _ = fit_with_watch(tmp_path, leak_bytes=MIB)
    creep = results["memory"]["creep"]
    assert creep["state"] == "confirmed"
    assert 0.65 * MIB <= creep["host_bytes_per_step"] <= 1.35 * MIB
    assert creep["out_of_memory_at_step"] > 300 and creep["out_of_memory_in_s"] > 0
    assert creep["since_step"] is not None and creep["since_step"] < 150
    assert len(warned) == 1  # once: the forecast did not halve
    assert warned[0].created < fit_end  # said while the run still lived
    assert "runs out at step" in warned[0].getMessage()
    # the record: the memory verdict beside the time verdict, the summary's Memory section
    assert results["verdict"]["memory"]["kind"] == "memory-creep"
    summary = format_run_summary(results)
    assert "Host creep              confirmed: +1.0 MiB a step" in summary
    assert "Memory: memory-creep:" in summary
    # live scalars to the trainer's logger (a CSV one here), every log_every_n_steps
    (metrics,) = tmp_path.rglob("metrics.csv")
    assert "perf/rss_bytes" in metrics.read_text().splitlines()[0].split(",")


def test_the_same_script_without_the_leak_reports_no_creep(tmp_path):
    results, warned, _, _ = fit_with_watch(tmp_path, leak_bytes=0)
    creep = results["memory"]["creep"]
    assert creep["state"] == "none" and not warned
    assert creep["host_bytes_per_step"] is None and creep["out_of_memory_at_step"] is None
    assert results["memory"]["trend"]["host"]["state"] == "flat"
    assert "memory" not in results["verdict"]
    assert "Host creep              none" in format_run_summary(results)


def _feed(values, settle: int = 10) -> Trend:
    trend = Trend("host", 32 * MIB)
    trend.settle(settle)
    for step, value in enumerate(values):
        trend.add(step, int(value))
        if step % 16 == 0:
            trend.judge()
    trend.judge()
    return trend


def test_a_level_shift_that_stays_flat_is_not_creep_and_a_steady_rise_is():
    noise = np.random.default_rng(0).normal(0, 2 * MIB, 600)
    base = 700 * MIB
    shift = _feed(base + np.where(np.arange(600) > 200, 400 * MIB, 0) + noise)  # workers starting, a pinned pool
    assert shift.state == "flat" and shift.confirmed is None
    rise = _feed(base + np.arange(600) * 0.5 * MIB + noise)
    assert rise.state == "confirmed" and rise.judged.slope == pytest.approx(0.5 * MIB, rel=0.1)
    late = _feed(base + np.maximum(0, np.arange(4000) - 2500) * 0.25 * MIB + np.resize(noise, 4000))
    assert late.state == "confirmed" and 2300 <= late.judged.since_step <= 2700  # since when it began


def test_a_million_step_run_keeps_a_bounded_record():
    trend = Trend("host", 32 * MIB)
    for step in range(1_000_000):
        trend.add(step, 700 * MIB + (step % 7) * 4096)
        if step % 4096 == 0:
            trend.judge()
    trend.judge()
    section = json.dumps(trend.section())
    assert len(section) < 20_000  # a few KB of results.json's 2 MB, whatever the run's length
    assert trend.state == "flat" and trend.points[-1][0] > 990_000


class _FakeTree:
    def __init__(self, rate: float) -> None:
        self.used, self.rate = 0.0, rate  # bytes grown so far, and a step's growth

    def read(self) -> tuple[int, int, int]:
        self.used += self.rate
        return int(800 * MIB + self.used), int(500 * MIB + self.used), int(500 * MIB + self.used)

    def close(self) -> None:
        pass


def _fake_trainer(device: str, logged: list) -> SimpleNamespace:
    logger = SimpleNamespace(log_metrics=lambda metrics, step: logged.append(metrics))
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)),
        global_rank=0,
        world_size=1,
        log_every_n_steps=10,
        is_global_zero=True,
        sanity_checking=False,
        global_step=0,
        loggers=[logger],
    )


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's memory counters for a 16 GiB device whose allocated memory grows 2 MiB a step."""
    state = {"allocated": 2**30}

    def allocated(device=None):
        state["allocated"] += 2 * MIB
        return state["allocated"]

    monkeypatch.setattr(torch.cuda, "memory_allocated", allocated)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state["allocated"] + 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: state["allocated"] + 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {"num_alloc_retries": 3, "num_ooms": 0})
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=16 * 2**30)
    )
    return state


def test_device_memory_creep_pressure_and_nvml_with_fakes(fake_cuda):
    logged: list = []
    trainer, watch = _fake_trainer("cuda:0", logged), MemoryWatch()
    watch.setup(trainer, None, "fit")
    watch.tree = _FakeTree(rate=0)  # host memory flat: the device creeps
    watch._nvml = NvmlGpu(0, FakeNvml(mem_used=5 * 2**30))
    for batch_idx in range(200):
        watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    results: dict = {"resources": {"gpu_mem_peak_bytes": 5 * 2**30}}
    watch.record(results)
    memory = results["memory"]
    assert watch.failed is None
    assert memory["creep"]["device_bytes_per_step"] == pytest.approx(2 * MIB, rel=0.05)
    assert memory["creep"]["host_bytes_per_step"] is None and memory["creep"]["runs_out_of"] == "device"
    # 16 GiB - (1.4 + 3) GiB reserved left, at 2 MiB a step: ~5,900 steps from step 200
    assert 5_000 < memory["creep"]["out_of_memory_at_step"] < 7_000
    device = memory["pressure"]["device"]
    assert device["reserved_overhang_bytes"] == 3 * 2**30 and device["alloc_retries"] == 3
    kinds = {f["kind"] for f in memory["findings"]}
    assert {"creep", "overhang", "pressure"} <= kinds  # retries are pressure
    assert {"perf/rss_bytes", "perf/device_allocated_bytes", "perf/device_used_bytes"} <= set(logged[0])
    assert logged[0]["perf/device_used_bytes"] == 5 * 2**30 and len(logged) == 20
    summary_rows = format_run_summary(results)
    assert "Device creep            confirmed: +2.0 MiB a step" in summary_rows
    assert "expandable_segments" in summary_rows


def test_the_warning_repeats_only_when_the_forecast_shortens_by_half(monkeypatch, caplog):
    logged: list = []
    trainer, watch = _fake_trainer("cpu", logged), MemoryWatch()
    watch.setup(trainer, None, "fit")
    watch.tree = tree = _FakeTree(rate=MIB)
    monkeypatch.setattr(
        "segperf.callbacks.memory_watch.host_room",
        lambda: {"available_bytes": 4 * 2**30 - tree.used, "capacity_bytes": 8 * 2**30, "limited_by": "x"},
    )
    with caplog.at_level(logging.WARNING, logger="segperf"):
        for batch_idx in range(300):
            watch.on_train_batch_end(trainer, None, None, None, batch_idx)
        assert len(watch.warnings) == 1  # steady: said once
        tree.rate = 8 * MIB  # the leak speeds up: the forecast shortens by far more than half
        for batch_idx in range(300, 500):
            watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert len(watch.warnings) >= 2  # again, and each time the forecast came nearer by half
    for before, after in zip(watch.warnings, watch.warnings[1:], strict=False):
        assert after["out_of_memory_at_step"] - after["step"] <= (before["out_of_memory_at_step"] - before["step"]) / 2
    assert sum("memory creep" in r.getMessage() for r in caplog.records) == len(watch.warnings)


def test_a_failing_reading_never_breaks_the_run_and_is_recorded(caplog):
    trainer, watch = _fake_trainer("cpu", []), MemoryWatch()
    watch.setup(trainer, None, "fit")
    watch.tree = SimpleNamespace(read=lambda: 1 / 0, close=lambda: None)
    with caplog.at_level(logging.WARNING, logger="segperf"):
        for batch_idx in range(5):
            watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert sum("MemoryWatch stopped" in r.getMessage() for r in caplog.records) == 1
    results: dict = {}
    watch.record(results)
    assert "ZeroDivisionError" in results["memory"]["not_measured"]


def test_one_leaking_rank_is_named_and_a_heavy_rank_is_an_imbalance():
    rows = [
        {"rank": 0, "memory": {"host_peak_bytes": 900 * MIB, "creep": "none"}},
        {"rank": 1, "memory": {"host_peak_bytes": 2000 * MIB, "creep": "confirmed", "host_bytes_per_step": MIB}},
    ]
    found = rank_memory(rows)
    assert found["creeping_ranks"] == [1] and found["host_imbalance"]["rank"] == 1
    assert "rank 1 creeps (host +1.0 MiB a step); the other ranks do not" in found["text"]
    assert "rank 1 peaks at 2.0 GiB host memory" in found["text"]


def integrated() -> bool:
    """PerfMonitor holds a MemoryWatch among its parts (the lead's integration of issue 51)."""
    return isinstance(getattr(PerfMonitor(), "memory", None), MemoryWatch)


@pytest.mark.slow
@pytest.mark.skipif(not integrated(), reason="needs MemoryWatch inside PerfMonitor: its record before the rank gather")
def test_a_leak_on_one_ddp_rank_names_that_rank(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--devices", "2", "--leak-bytes", str(MIB), "--leak-rank", "1"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "memory creep on rank 1" in text and "memory creep on rank 0" not in text
    (path,) = tmp_path.rglob("results.json")  # rank 0's
    results = json.loads(path.read_text())
    rows = {row["rank"]: row["memory"] for row in results["distributed"]["ranks"]}
    assert rows[1]["creep"] == "confirmed" and rows[0]["creep"] != "confirmed"
    assert "rank 1 creeps" in path.with_name("summary.txt").read_text()


def _own_run(kind: str, tiny_carvana: Path, tiny_mnist: Path) -> list[str]:
    if kind == "carvana":  # the decoded cache filled up front, read through shared memory by the workers
        # 200 steps: read every 8 (mallinfo2), the trend needs 12 points past the first validation
        size = ["train_images=800", "val_every_images=160"]
        return [*TINY, *NARROW_UNET, f"data.root={tiny_carvana}", *size, "cache=memory", "workers=auto"]
    return [*MNIST_TINY, f"data.root={tiny_mnist}", "train_images=6400", "val_every_images=1600", "workers=auto"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["carvana", "mnist"])
def test_segperfs_own_runs_that_fill_caches_and_start_workers_report_no_creep(kind, tiny_carvana, tiny_mnist, tmp_path):
    args = [*_own_run(kind, tiny_carvana, tiny_mnist), "trainer.log_every_n_steps=10"]  # PerfMonitor's MemoryWatch
    done = run_cli([*args, f"hydra.run.dir={tmp_path}"], cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    memory = json.loads((tmp_path / "results.json").read_text())["memory"]
    assert memory["trend"]["host"]["state"] == "flat", memory["trend"]["host"]  # judged, and found flat
    assert memory["creep"]["host_bytes_per_step"] is None and "memory creep" not in done.stdout + done.stderr
    assert "Host creep              none" in (tmp_path / "summary.txt").read_text()


def test_compare_says_when_a_faster_candidate_needs_twice_the_memory(tmp_path, capsys):
    from segperf.compare.cli import main
    from tests.test_compare import compare_json, edit_runs, side

    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=2)  # CAND ~2x faster
    edit_runs(ref, lambda results: results.setdefault("resources", {}).update(rss_peak_bytes=600 * MIB))
    edit_runs(cand, lambda results: results.setdefault("resources", {}).update(rss_peak_bytes=1500 * MIB))
    assert main([str(ref), str(cand)]) == 0
    assert (
        "memory: CAND is faster but needs 2.5x REF's peak host memory (1.5 GiB vs 600.0 MiB)" in capsys.readouterr().out
    )
    memory = compare_json(cand)["memory"]
    assert memory["ratio"]["host"] == pytest.approx(2.5)
    assert memory["ref_peak_bytes"]["host"] == 600 * MIB


@pytest.mark.slow  # a million hook calls: ~15 s on a busy 2-core machine
def test_a_million_steps_through_perfmonitors_memory_part_keep_its_record_bounded():
    watch, trainer = PerfMonitor(peak_probe=False).memory, _fake_trainer("cpu", [])
    watch.setup(trainer, None, "fit")
    watch.tree = _FakeTree(rate=1024)  # a slow leak all run long: the trend, a warning, a forecast
    for batch_idx in range(1_000_000):
        watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    results: dict = {}
    watch.record(results)
    memory = results["memory"]
    assert memory["creep"]["state"] == "confirmed" and len(memory["warnings"]) == 1
    assert len(memory["trend"]["host"]["floors"]) <= 128 and memory["trend"]["host"]["block_steps"] >= 4096
    assert len(json.dumps(memory)) < 20_000  # of results.json's 2 MB


def _forked_worker(started, grow, grown, done) -> None:
    started.set()
    grow.wait(30)
    own = b"\x01" * (32 * MIB)  # written: resident, and this worker's alone
    grown.set()
    done.wait(30)
    del own


def test_a_forked_workers_copy_of_its_parent_counts_once_and_what_it_adds_counts():
    import multiprocessing

    from segperf.perf.host_memory import TreeMemory

    kept = b"\x02" * (64 * MIB)  # the parent's: a forked worker maps these pages too
    context = multiprocessing.get_context("fork")  # as a DataLoader's workers start on Linux
    started, grow, grown, done = (context.Event() for _ in range(4))
    tree = TreeMemory(refresh_s=0.0)  # re-listed at each read: the worker is seen at once
    before = tree.read()
    worker = context.Process(target=_forked_worker, args=(started, grow, grown, done))
    worker.start()
    try:
        assert started.wait(30)
        seen = tree.read()
        grow.set()
        assert grown.wait(30)
        after = tree.read()
    finally:
        done.set()
        worker.join(30)
    assert seen.private - before.private > 60 * MIB  # summed over the tree, the parent's pages twice
    assert abs(seen.own - before.own) < 16 * MIB  # ... and once in what creep is judged on
    assert 24 * MIB < after.own - seen.own < 48 * MIB  # what the worker allocated itself counts
    assert len(kept) == 64 * MIB


class _SawTree(_FakeTree):
    """Memory that workers restarted every epoch gain within it (a cache they fill), freed at its end."""

    def __init__(self, rate: float, epoch_steps: int) -> None:
        super().__init__(rate)
        self.epoch_steps, self.steps = epoch_steps, 0

    def read(self) -> tuple[int, int, int]:
        self.steps += 1
        self.used = self.rate * ((self.steps - 1) % self.epoch_steps + 1)
        return int(800 * MIB + self.used), int(500 * MIB + self.used), int(500 * MIB + self.used)


@pytest.mark.parametrize("persistent", [False, True])
def test_what_restarting_workers_gain_within_an_epoch_is_not_warned_as_creep(persistent):
    logged: list = []
    trainer, watch = _fake_trainer("cpu", logged), MemoryWatch()
    trainer.train_dataloader = SimpleNamespace(num_workers=2, persistent_workers=persistent)
    trainer.num_training_batches = 120
    watch.setup(trainer, None, "fit")
    watch.tree = _SawTree(rate=3 * MIB, epoch_steps=120)
    for batch_idx in range(600):
        if batch_idx % 120 == 0:
            watch.on_train_epoch_start(trainer, None)
        watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    # each epoch's rise looks like creep while it lasts; workers that restart free it at the end
    assert watch.warnings == [] if not persistent else len(watch.warnings) >= 1
    assert watch.failed is None


def test_a_leak_in_the_main_process_with_restarting_workers_is_warned_once_it_outlives_an_epoch():
    trainer, watch = _fake_trainer("cpu", []), MemoryWatch()
    trainer.train_dataloader = SimpleNamespace(num_workers=2, persistent_workers=False)
    trainer.num_training_batches = 120
    watch.setup(trainer, None, "fit")
    watch.tree = _FakeTree(rate=MIB)
    for batch_idx in range(600):
        if batch_idx % 120 == 0:
            watch.on_train_epoch_start(trainer, None)
        watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert len(watch.warnings) == 1 and 120 < watch.warnings[0]["step"] < 300  # in the second epoch


def _fitted_with_holes(monkeypatch, mallinfo2, available: int) -> dict:
    """300 steps of a tree growing 1.3 MiB a step of which malloc's heap holes are 1.0 MiB (fake)."""
    monkeypatch.setattr("segperf.callbacks.memory_watch.HeapHoles", lambda: HeapHoles(lambda: mallinfo2))
    monkeypatch.setattr(
        "segperf.callbacks.memory_watch.host_room",
        lambda: {"available_bytes": available, "capacity_bytes": 8 * 2**30, "limited_by": "available RAM"},
    )
    trainer, watch = _fake_trainer("cpu", []), MemoryWatch()
    watch.setup(trainer, None, "fit")
    watch.tree = tree = _FakeTree(rate=1.3 * MIB)
    holes = SimpleNamespace(fordblks=0, keepcost=4096)

    def info():
        holes.fordblks = int(tree.used / 1.3)  # 1.0 of each 1.3 MiB the tree grew is free heap
        return holes

    if mallinfo2 is not None:
        watch.holes._call = info
    for batch_idx in range(300):
        watch.on_train_batch_end(trainer, None, None, None, batch_idx)
    results: dict = {}
    watch.record(results)
    return results["memory"]


def test_malloc_free_heap_bytes_are_not_creep_and_without_mallinfo2_the_record_says_so(monkeypatch):
    memory = _fitted_with_holes(monkeypatch, mallinfo2=object(), available=4 * 2**30)
    host = memory["trend"]["host"]
    assert memory["creep"]["host_bytes_per_step"] == pytest.approx(0.3 * MIB, rel=0.02)  # held, not resident
    assert host["process_growth_bytes_per_step"] == pytest.approx(1.3 * MIB, rel=0.02)
    assert "mallinfo2" in host["measure"] and host["read_every_n_steps"] == 8
    assert memory["creep"]["out_of_memory_at_step"] == pytest.approx(300 + 4 * 2**30 / (0.3 * MIB), rel=0.03)
    assert memory["pressure"]["host"]["peak_private_bytes"] == pytest.approx(500 * MIB + 300 * 1.3 * MIB, rel=0.01)
    # near the limit the heap's bursts come first: the forecast takes the process's growth
    near = _fitted_with_holes(monkeypatch, mallinfo2=object(), available=100 * MIB)
    assert near["creep"]["out_of_memory_at_step"] == pytest.approx(300 + 100 / 1.3, abs=2)
    # musl, macOS, old glibc: nothing subtracted, and results.json says so
    plain = _fitted_with_holes(monkeypatch, mallinfo2=None, available=4 * 2**30)
    assert plain["creep"]["host_bytes_per_step"] == pytest.approx(1.3 * MIB, rel=0.02)
    assert "no mallinfo2" in plain["trend"]["host"]["measure"] and plain["trend"]["host"]["mallinfo2_us"] is None
