"""Lightning's ways of running, each on a tiny model with PerfMonitor in its Trainer: the run
ends as it would without the monitor, and the record says what was measured (docs/MEASUREMENT.md
has the table). DDP, 2 processes and 2 torchrun nodes: tests/test_monitor_ddp.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from segperf import PerfMonitor
from tests.test_perf_monitor import Classifier, Points

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, accelerator="cpu")


def train_loader(n: int = 64) -> DataLoader:
    return DataLoader(Points(True, n=n), batch_size=4)


def val_loader() -> DataLoader:
    return DataLoader(Points(True, n=8), batch_size=4)


def record(folder) -> dict:
    return json.loads((folder / "results.json").read_text())


def assert_measured(results: dict, steps: int, caplog) -> None:
    assert results["status"] == "completed"
    assert results["train"]["steps"] == steps
    assert "not_measured" not in results, results.get("not_measured")
    assert results["phases"]["train_step"]["calls"] == steps
    assert results["accounted"]["fraction"] >= 0.9
    assert not [r for r in caplog.records if r.name == "segperf" and r.levelno >= logging.WARNING]


def test_no_validation(tmp_path, caplog):
    trainer = L.Trainer(callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_steps=8, **QUIET)
    trainer.fit(Classifier(), train_loader())
    results = record(tmp_path)
    assert_measured(results, 8, caplog)
    assert results["phases"]["validation"]["calls"] == 0 and results["quality"] == {}


def test_gradient_accumulation_counts_every_batch_and_splits_each(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_epochs=1,
        accumulate_grad_batches=4, **QUIET,
    )  # fmt: skip
    trainer.fit(Classifier(), train_loader())
    results = record(tmp_path)
    assert_measured(results, 16, caplog)  # 16 batches, 4 optimizer steps
    assert trainer.global_step == 4
    assert results["phases"]["train_step"]["split"]["backward"]["calls"] == 14


class TwoOptimizers(L.LightningModule):
    """GAN-style manual optimization: a generator and a discriminator, each with its optimizer."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.discriminator = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        real = batch["features"]
        g_opt, d_opt = self.optimizers()
        fake = self.generator(torch.randn(len(real), 8))
        d_loss = self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        g_loss = -self.discriminator(fake).mean()
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self):
        return torch.optim.Adam(self.generator.parameters()), torch.optim.Adam(self.discriminator.parameters())


def test_manual_optimization_with_two_optimizers(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_steps=16, **QUIET
    )
    trainer.fit(TwoOptimizers(), train_loader())
    results = record(tmp_path)
    assert_measured(results, 8, caplog)  # max_steps counts both optimizers' steps: 8 batches
    split = results["phases"]["train_step"]["split"]  # forward to the first backward, the last backward's end
    assert split["backward"]["calls"] == 6 and split["optimizer_step"]["wall_s"] > 0


def test_limit_train_batches_and_max_epochs(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_epochs=3,
        limit_train_batches=5, limit_val_batches=1, num_sanity_val_steps=0, **QUIET,
    )  # fmt: skip
    trainer.fit(Classifier(), train_loader(), val_loader())
    results = record(tmp_path)
    assert_measured(results, 15, caplog)
    assert results["phases"]["validation"]["calls"] == 3 and len(results["quality"]["val_history"]) == 3


def test_val_check_interval_as_a_fraction(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_epochs=1,
        val_check_interval=0.25, num_sanity_val_steps=0, **QUIET,
    )  # fmt: skip
    trainer.fit(Classifier(), train_loader(), val_loader())
    results = record(tmp_path)
    assert_measured(results, 16, caplog)
    assert results["phases"]["validation"]["calls"] == 4  # every 4 of the 16 batches


class Stream(IterableDataset):
    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for _ in range(40):
            x = torch.randn(16, generator=generator)
            yield {"features": x, "label": (x[0] > 0).long()}


def test_an_iterable_dataset(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_epochs=1, **QUIET
    )
    trainer.fit(Classifier(), DataLoader(Stream(), batch_size=4))
    results = record(tmp_path)
    assert_measured(results, 10, caplog)
    assert results["train"]["images"] == 40


class OwnLoaders(Classifier):
    """A module that brings its own loaders: no DataModule, nothing passed to fit."""

    def train_dataloader(self):
        return train_loader()

    def val_dataloader(self):
        return val_loader()


def test_a_module_with_its_own_loaders(tmp_path, caplog):
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], logger=False, max_epochs=1,
        num_sanity_val_steps=0, **QUIET,
    )  # fmt: skip
    trainer.fit(OwnLoaders())
    results = record(tmp_path)
    assert_measured(results, 16, caplog)
    assert results["quality"]["metric"] == "val_acc"


@pytest.mark.parametrize("kinds", [("csv",), ("tensorboard",), ("csv", "tensorboard")], ids="+".join)
def test_the_users_loggers_each_get_the_scalars(tmp_path, caplog, kinds):
    loggers = [
        CSVLogger(tmp_path, name="csv") if kind == "csv" else TensorBoardLogger(tmp_path, name="tb") for kind in kinds
    ]
    trainer = L.Trainer(
        callbacks=[PerfMonitor(peak_probe=False)], logger=loggers, max_steps=12, log_every_n_steps=4, **QUIET
    )
    trainer.fit(Classifier(), train_loader())
    results = record(Path(trainer.log_dir))
    assert_measured(results, 12, caplog)
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            header = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0].split(",")
            # live every log_every_n_steps after warm-up, and the run's figures at the end
            assert {"perf/samples_per_s", "perf/data_wait_fraction", "perf/train_samples_per_s"} <= set(header)
        else:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

            events = EventAccumulator(str(tmp_path / "tb" / "version_0")).Reload()
            tags = set(events.Tags()["scalars"])
            assert {"perf/samples_per_s", "perf/data_wait_fraction", "perf/train_samples_per_s"} <= tags
            assert [e.step for e in events.Scalars("perf/samples_per_s")] == [4, 8, 12]


def test_fit_called_twice_on_one_trainer_records_each_fit(tmp_path, caplog):
    monitor = PerfMonitor(dirpath=tmp_path, peak_probe=False)
    trainer = L.Trainer(callbacks=[monitor], logger=False, max_epochs=1, **QUIET)
    model = Classifier()
    trainer.fit(model, train_loader())
    first = record(tmp_path)
    trainer.fit_loop.max_epochs = 2
    trainer.fit(model, train_loader())
    second = record(tmp_path)
    assert_measured(first, 16, caplog)
    assert_measured(second, 16, caplog)  # the second fit's own steps, not both fits'
    assert second["accounted"]["run_wall_s"] < first["accounted"]["run_wall_s"] + 60
