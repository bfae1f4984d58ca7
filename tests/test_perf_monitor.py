"""PerfMonitor in a user's own script: `L.Trainer(callbacks=[PerfMonitor()])`, nothing else changed."""

from __future__ import annotations

import csv
import json
import logging
import time

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.profilers import SimpleProfiler
from torch import nn
from torch.utils.data import DataLoader, Dataset

from segperf import PerfMonitor
from segperf.callbacks.batch_size import BatchSizeError, batch_size


class Points(Dataset):
    """64 noisy 2-D points of 2 classes, as a dict or a tuple per sample; `sleep_s` per sample
    stands for a slow decoder in the main process."""

    def __init__(self, as_dict: bool, sleep_s: float = 0.0, n: int = 64) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=generator)
        self.y = (self.x[:, 0] > 0).long()
        self.as_dict, self.sleep_s = as_dict, sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return {"features": self.x[i], "label": self.y[i]} if self.as_dict else (self.x[i], self.y[i])


class Classifier(L.LightningModule):
    """A user's module: it knows nothing of segperf."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))

    def _loss(self, batch):
        x, y = (batch["features"], batch["label"]) if isinstance(batch, dict) else batch
        logits = self.net(x)
        return nn.functional.cross_entropy(logits, y), (logits.argmax(1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)[0]
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._loss(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc})

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(monitor: PerfMonitor, *, as_dict: bool = True, sleep_s: float = 0.0, **trainer_args) -> None:
    options = dict(max_epochs=1, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    options.update(logger=False, num_sanity_val_steps=0, accelerator="cpu", devices=1)
    trainer = L.Trainer(callbacks=[monitor], **{**options, **trainer_args})
    train = DataLoader(Points(as_dict, sleep_s), batch_size=4)
    val = DataLoader(Points(as_dict, n=8), batch_size=4)
    trainer.fit(Classifier(), train, val)


@pytest.fixture(scope="module")
def dict_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dict_run")
    fit(PerfMonitor(dirpath=folder, peak_probe=False))
    return folder, json.loads((folder / "results.json").read_text())


def test_a_users_trainer_gets_results_and_the_summary(dict_run, capsys):
    folder, results = dict_run
    assert results["status"] == "completed"
    assert results["train"]["images"] == 64 and results["train"]["steps"] == 16  # samples of dict batches
    assert results["train"]["images_per_s"] > 0
    assert {"data_wait", "train_step", "warmup", "validation", "setup"} <= results["phases"].keys()
    assert results["accounted"]["fraction"] >= 0.9
    # the loop's time between the profiled actions (Lightning's hooks and bookkeeping) has a name
    assert results["phases"]["framework"]["calls"] == 16 and results["phases"]["framework"]["wall_s"] > 0
    assert results["jitter"]["train_step"]["count"] == 14  # after the 2 warm-up steps
    assert results["resources"]["cpu_mean_percent"] is not None
    assert results["throughput"]["train_flops_per_image"] > results["throughput"]["val_flops_per_image"] > 0
    quality = results["quality"]  # whatever the module logged in validation, judged as segperf.train judges it
    assert {"val_loss", "val_acc", "first_val_acc", "val_history"} <= quality.keys()
    assert (quality["metric"], quality["mode"]) == ("val_acc", "max")
    # a run of 16 tiny steps can be mostly its warm-up: that is a verdict too
    assert results["verdict"]["kind"] in {"compute-bound", "overhead-bound", "data-bound", "warm-up-bound"}
    text = (folder / "summary.txt").read_text()
    for heading in ("Per-phase statistics", "Jitter", "Throughput", "Verdict", "Train samples/s"):
        assert heading in text
    # how busy the machine was, as segperf's own runs record it (the report flags a busy run)
    assert results["machine_load"]["others_cores"] is not None and results["machine_load"]["window_s"] > 0
    assert "Load      1-min load" in text and "other processes" in text


def test_the_summary_is_logged_at_the_end_of_fit_and_can_be_silenced(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="segperf"):
        fit(PerfMonitor(dirpath=tmp_path, peak_probe=False), max_steps=4)
    out = "\n".join(r.getMessage() for r in caplog.records if r.name == "segperf")
    assert "Per-phase statistics" in out and f"Results: {tmp_path / 'results.json'}" in out
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="segperf"):
        fit(PerfMonitor(dirpath=tmp_path / "quiet", peak_probe=False), max_steps=4)
    assert not [r for r in caplog.records if r.name == "segperf"]
    assert (tmp_path / "quiet" / "results.json").exists()  # silenced, still recorded


def test_train_step_splits_into_forward_backward_and_optimizer_step_within_it(dict_run):
    _, results = dict_run
    train_step = results["phases"]["train_step"]
    split = train_step["split"]
    assert split.keys() == {"forward", "backward", "optimizer_step"}
    assert all(part["calls"] == 14 and part["wall_s"] > 0 for part in split.values())
    parts = sum(part["wall_s"] for part in split.values())
    assert parts <= train_step["wall_s"] * 1.01  # the same steps, cut at the backward's edges
    assert parts >= train_step["wall_s"] * 0.9
    assert sum(part["of_train_step"] for part in split.values()) == pytest.approx(1.0)


def test_tuple_batches_and_a_users_batch_size_fn(tmp_path):
    # e.g. a user whose samples are 2 crops each: they count what a sample is
    fit(PerfMonitor(dirpath=tmp_path, peak_probe=False, batch_size_fn=lambda batch: 2 * len(batch[0])), as_dict=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["train"]["images"] == 128 and results["train"]["steps"] == 16


def test_a_loader_slowed_in_the_main_process_is_data_bound_with_dataloader_advice(tmp_path):
    fit(PerfMonitor(dirpath=tmp_path, peak_probe=False), sleep_s=0.02, limit_val_batches=1)
    results = json.loads((tmp_path / "results.json").read_text())
    run = results["accounted"]["run_wall_s"]
    assert results["phases"]["data_wait"]["wall_s"] >= 0.3 * run
    assert results["verdict"]["kind"] == "data-bound"
    assert "DataLoader(num_workers=" in results["verdict"]["text"]  # the knobs a plain DataLoader has
    assert "workers=auto" not in results["verdict"]["text"]  # not segperf's config groups


def test_files_go_to_the_log_dir_scalars_through_the_users_logger_and_their_profiler_is_kept(tmp_path):
    logger = CSVLogger(tmp_path, name="mine")
    profiler = SimpleProfiler(dirpath=tmp_path, filename="their-profile")
    fit(PerfMonitor(peak_probe=False), max_steps=6, logger=logger, profiler=profiler, log_every_n_steps=1)
    log_dir = tmp_path / "mine" / "version_0"
    results = json.loads((log_dir / "results.json").read_text())
    assert results["phases"]["data_wait"]["calls"] >= 4  # timed through the user's profiler
    assert (tmp_path / "fit-their-profile.txt").is_file()  # which still wrote its own report
    with open(log_dir / "metrics.csv") as f:
        columns = next(csv.reader(f))
    assert {"perf/train_samples_per_s", "phases/train_step_s", "phases/data_wait_fraction"} <= set(columns)
    assert "logging" in results["phases"]  # the user's logger's writes, timed


def test_a_failed_fit_still_writes_its_record(tmp_path):
    class Failing(Classifier):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, enable_progress_bar=False,
        enable_checkpointing=False, accelerator="cpu", max_epochs=1,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing(), DataLoader(Points(True), batch_size=4))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and "boom" in results["error"]
    assert results["train"]["steps"] == 3


@pytest.mark.parametrize(
    "batch,expected",
    [
        (torch.zeros(5, 3), 5),
        ((torch.zeros(6, 2), torch.zeros(6)), 6),
        ([["a", "b"], torch.zeros(7, 1)], 7),  # strings first: the first *tensor* counts
        ({"meta": {"ids": torch.zeros(3)}, "x": torch.zeros(9)}, 3),
    ],
)
def test_samples_are_the_leading_dimension_of_the_first_tensor(batch, expected):
    assert batch_size(batch) == expected


def test_a_batch_without_a_tensor_says_to_pass_batch_size_fn():
    with pytest.raises(BatchSizeError, match="batch_size_fn"):
        batch_size({"paths": ["a.jpg"]})


def test_what_measuring_cost_is_recorded_directly_and_said_in_the_summary(dict_run):
    folder, results = dict_run
    cost = results["measurement_cost"]
    assert cost["hooks_s"] > 0 and cost["tap_s"] > 0 and cost["sampler_cpu_s"] >= 0
    spent = cost["hooks_s"] + cost["tap_s"] + cost["sampler_cpu_s"]
    assert cost["fraction"] == pytest.approx(spent / results["accounted"]["run_wall_s"])
    assert f"Measuring took {cost['fraction']:.2%} of a core" in (folder / "summary.txt").read_text()
