"""A monitor never breaks the run it measures: whatever fails inside PerfMonitor becomes one
warning and a part of the record marked not measured; the user's fit runs every step."""

from __future__ import annotations

import errno
import json
import logging
import threading

import lightning as L
import pytest
from torch.utils.data import DataLoader

from segperf import PerfMonitor
from segperf.callbacks.mfu_monitor import MfuMonitor
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.resource_monitor import ResourceMonitor
from tests.test_perf_monitor import Classifier, Points

STEPS = 6


def fit(monitor: PerfMonitor, **trainer_args) -> L.Trainer:
    options = dict(max_steps=STEPS, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    options.update(logger=False, num_sanity_val_steps=0, accelerator="cpu", devices=1, limit_val_batches=1)
    options.update(val_check_interval=3)
    trainer = L.Trainer(callbacks=[monitor], **{**options, **trainer_args})
    trainer.fit(Classifier(), DataLoader(Points(True), batch_size=4), DataLoader(Points(True, n=8), batch_size=4))
    return trainer


def segperf_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "segperf" and r.levelno >= logging.WARNING]


def test_a_folder_it_cannot_write_costs_one_warning_and_no_step(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    trainer = fit(PerfMonitor(dirpath=blocker / "results", peak_probe=False))
    assert trainer.global_step == STEPS and trainer.state.finished
    (line,) = segperf_warnings(caplog)
    assert "could not write results.json" in line and str(blocker / "results") in line and "dirpath" in line


def test_a_full_disk_costs_one_warning_and_the_summary_is_still_logged(tmp_path, caplog, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("segperf.perf.results.write_json_atomic", full)
    with caplog.at_level(logging.INFO, logger="segperf"):
        trainer = fit(PerfMonitor(dirpath=tmp_path, peak_probe=False))
    assert trainer.global_step == STEPS
    (line,) = segperf_warnings(caplog)
    assert "No space left on device" in line
    assert any("Per-phase statistics" in r.getMessage() for r in caplog.records)


def _raise(*args, **kwargs):
    raise RuntimeError("injected fault")


# (what is broken, where, the part the record then names)
FAULTS = [
    (PhaseClock, "on_train_batch_end", "PhaseClock"),
    (PhaseClock, "on_before_backward", "PhaseClock"),
    (PhaseClock, "on_validation_end", "PhaseClock"),
    (ResourceMonitor, "setup", "ResourceMonitor"),
    (ResourceMonitor, "record", "resources"),
    (MfuMonitor, "on_train_batch_start", "MfuMonitor"),
    (MfuMonitor, "record", "FLOPs and MFU"),
    ("segperf.callbacks.perf_monitor", "loader_settings", "the training loader's settings"),
    ("segperf.perf.fit_record", "verdict", "the verdict"),
    ("segperf.callbacks.perf_monitor", "machine_info", "the machine"),
    ("segperf.perf.fit_record", "format_run_summary", "the summary"),
    ("segperf.perf.fit_record", "train_section", "the record"),
]


@pytest.mark.parametrize(("owner", "name", "part"), FAULTS, ids=[f"{f[1]}" for f in FAULTS])
def test_a_fault_in_any_part_is_one_warning_and_a_part_marked_not_measured(
    tmp_path, caplog, monkeypatch, owner, name, part
):
    if isinstance(owner, str):
        monkeypatch.setattr(f"{owner}.{name}", _raise)
    else:
        monkeypatch.setattr(owner, name, _raise)
    trainer = fit(PerfMonitor(dirpath=tmp_path, peak_probe=False))
    assert trainer.global_step == STEPS and trainer.state.finished  # every step, as without the monitor
    lines = segperf_warnings(caplog)
    assert len(lines) == 1 and part in lines[0] and "injected fault" in lines[0], lines
    if part == "the summary":
        return  # nothing to write: the summary is what failed
    results = json.loads((tmp_path / "results.json").read_text())
    assert "injected fault" in results["not_measured"][part.split(" (")[0]]


def test_a_batch_it_cannot_size_is_one_warning_and_the_run_ends_as_without_it(tmp_path, caplog):
    def unsizeable(batch):
        raise TypeError("what is a sample here?")

    trainer = fit(PerfMonitor(dirpath=tmp_path, peak_probe=False, batch_size_fn=unsizeable))
    assert trainer.global_step == STEPS
    assert len(segperf_warnings(caplog)) >= 1
    assert all("what is a sample here?" in line for line in segperf_warnings(caplog))


def test_the_users_own_error_still_reaches_them_and_is_recorded(tmp_path):
    class Failing(Classifier):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise ValueError("their bug")
            return super().training_step(batch, batch_idx)

    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, enable_progress_bar=False,
        enable_checkpointing=False, accelerator="cpu", max_steps=STEPS,
    )  # fmt: skip
    with pytest.raises(ValueError, match="their bug"):
        trainer.fit(Failing(), DataLoader(Points(True), batch_size=4))
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"


class Evaluated(Classifier):
    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch)[0])


class BrokenTest(Classifier):
    def test_step(self, batch, batch_idx):
        raise RuntimeError("test step broke")


def test_an_evaluation_without_a_fit_leaves_no_thread_and_no_record(tmp_path):
    # the template's eval.py: trainer.test on a trained checkpoint, PerfMonitor among the callbacks
    monitor = PerfMonitor(dirpath=tmp_path, peak_probe=False)
    trainer = L.Trainer(callbacks=[monitor], logger=False, enable_progress_bar=False, accelerator="cpu", devices=1)
    before = set(threading.enumerate())
    trainer.test(Evaluated(), DataLoader(Points(True, n=8), batch_size=4))
    assert set(threading.enumerate()) <= before  # no sampler thread left running
    assert not (tmp_path / "results.json").exists()


def test_a_test_that_fails_after_a_fit_keeps_the_fits_record(tmp_path):
    monitor = PerfMonitor(dirpath=tmp_path, peak_probe=False)
    trainer = fit(monitor)
    model = BrokenTest()
    with pytest.raises(RuntimeError, match="test step broke"):
        trainer.test(model, DataLoader(Points(True, n=8), batch_size=4))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and results["train"]["steps"] == STEPS
