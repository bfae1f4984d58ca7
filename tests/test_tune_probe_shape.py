"""The tuner's runs, shaped so that a user's module runs as in a real run: a run that crosses an
epoch end of a training split shorter than the probe validates before it when the module or its
callbacks watch a validation metric (ReduceLROnPlateau on `val_loss` stepped once an epoch,
EarlyStopping, ModelCheckpoint(monitor=...)); a run that still fails for the probe's shape is run
again in the user's own shape, and is the tuner's problem, never a verdict on the configuration,
when that fails too. The whole tune on lightning-hydra-template with a short split: slow tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from hydra.core.utils import JobStatus
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from segperf.callbacks.epoch_end_validation import EpochEndValidation
from segperf.perf.decision import compare_pooled
from segperf.tune.probe import Probe
from segperf.tune.probe_results import probe_from_results
from segperf.tune.probe_shape import failed_for_its_shape
from segperf.tune.runner import PROBE_EPOCH_ENDS, LaunchMeasure
from segperf.tune.search import UNMEASURED, Step
from segperf.tune.search.verdicts import judge
from tests.conftest import QUIET
from tests.test_outside_projects import TEMPLATE
from tests.test_tune_runner import SPEED_PROBE, compose_tune, results, run_folder

PLATEAU_ERROR = (
    "MisconfigurationException: ReduceLROnPlateau conditioned on metric val/loss which is not available. "
    "Available metrics are: ['lr-Adam', 'train/loss']. Condition can be set using `monitor` key in lr scheduler dict"
)


class PlateauModule(L.LightningModule):
    """A user's module as the template's: ReduceLROnPlateau on `val_loss`, stepped once an epoch."""

    def __init__(self, plateau: bool = True) -> None:
        super().__init__()
        self.layer, self.plateau = torch.nn.Linear(4, 1), plateau

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        if not self.plateau:
            return optimizer
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}

    def loader(self):
        return DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)  # 4 batches

    def train_dataloader(self):
        return self.loader()

    def val_dataloader(self):
        return self.loader()


def probe_trainer(tmp_path: Path, *callbacks: L.Callback) -> L.Trainer:
    """A Trainer shaped as segperf shapes a probe of a user's module: 10 steps over a 4-batch split,
    validation only after 10 batches (val_every_images), counted across epochs, on one batch."""
    return L.Trainer(
        max_steps=10,
        max_epochs=-1,
        limit_train_batches=10,
        val_check_interval=10,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
    )


def test_a_probe_longer_than_the_split_stops_at_the_first_epoch_end_without_validation_first(tmp_path):
    with pytest.raises(MisconfigurationException, match="conditioned on metric val_loss which is not available"):
        probe_trainer(tmp_path).fit(PlateauModule())


@pytest.mark.parametrize(
    "watching, module",
    [
        ("ReduceLROnPlateau(val_loss)", PlateauModule()),
        ("EarlyStopping(val_loss)", PlateauModule(plateau=False)),
        ("ModelCheckpoint(val_loss)", PlateauModule(plateau=False)),
    ],
)
def test_a_probe_past_an_epoch_end_validates_at_each_epoch_end_when_a_metric_is_watched(tmp_path, watching, module):
    users = {
        "EarlyStopping(val_loss)": [EarlyStopping(monitor="val_loss", patience=100)],
        "ModelCheckpoint(val_loss)": [ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss")],
    }.get(watching, [])
    shape = EpochEndValidation()
    trainer = probe_trainer(tmp_path, *users, shape)
    trainer.fit(module)
    assert trainer.global_step == 10  # the whole probe, not stopped at the first epoch end
    record: dict = {}
    shape.record(record)
    section = record["epoch_end_validation"]
    assert section["epoch_batches"] == 4 and section["watched_by"] == [watching]
    if watching.startswith("ModelCheckpoint"):
        assert list((tmp_path / "ckpt").glob("*.ckpt"))  # it saved on the metric it watches


def test_a_probe_of_a_module_that_watches_nothing_keeps_its_validation(tmp_path):
    shape = EpochEndValidation()
    trainer = probe_trainer(tmp_path, shape)
    trainer.fit(PlateauModule(plateau=False))
    record: dict = {}
    shape.record(record)
    assert trainer.global_step == 10 and record == {} and trainer.val_check_batch == 10


class SteadyLossModule(PlateauModule):
    """A user's module whose validation loss never improves after its first check: an
    EarlyStopping(patience=0) on it stops a run at its second validation."""

    def __init__(self) -> None:
        super().__init__(plateau=False)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.tensor(1.0))


class StopAtValidation(L.Callback):
    """Something else that ends the run at its first validation (a time limit, say)."""

    def on_validation_end(self, trainer, pl_module):
        trainer.should_stop = True


def test_a_users_early_stopping_does_not_end_a_probe_and_the_record_says_it_would_have(tmp_path):
    stopper = EarlyStopping(monitor="val_loss", patience=0)
    shape = EpochEndValidation(probe=True)
    trainer = probe_trainer(tmp_path, stopper, shape)
    trainer.fit(SteadyLossModule())
    assert trainer.global_step == 10  # the whole probe: validated at steps 4 and 8, stopped by neither
    record: dict = {}
    shape.record(record)
    held = record["epoch_end_validation"]["early_stopping"]
    assert held["callbacks"] == ["EarlyStopping(val_loss)"] and held["stops_taken_back"] >= 1
    assert held["first_stop"]["step"] == 8 and "did not improve" in held["first_stop"]["reason"]
    assert "on_validation_end" not in vars(stopper)  # the user's callback is itself again after the run


def test_a_learning_run_keeps_the_users_early_stopping(tmp_path):
    # the quality guard's learning runs are not probes: EarlyStopping ends them as in the user's runs
    stopper = EarlyStopping(monitor="val_loss", patience=0)
    shape = EpochEndValidation()
    trainer = probe_trainer(tmp_path, stopper, shape)
    trainer.fit(SteadyLossModule())
    assert trainer.global_step == 8
    record: dict = {}
    shape.record(record)
    assert "early_stopping" not in record["epoch_end_validation"]


def test_a_probe_stopped_by_something_else_at_a_validation_stays_stopped(tmp_path):
    shape = EpochEndValidation(probe=True)
    trainer = probe_trainer(tmp_path, StopAtValidation(), EarlyStopping(monitor="val_loss", patience=0), shape)
    trainer.fit(SteadyLossModule())
    assert trainer.global_step == 4  # the other stop stands; only EarlyStopping's own is taken back
    record: dict = {}
    shape.record(record)
    assert record["epoch_end_validation"]["early_stopping"]["stops_taken_back"] == 0


def test_a_failure_of_the_probes_shape_is_told_apart_from_a_configurations():
    assert failed_for_its_shape(Probe(("data.prefetch_factor=8",), None, failed=PLATEAU_ERROR))
    checkpoint = "MisconfigurationException: `ModelCheckpoint(monitor='val/acc')` could not find the monitored key"
    assert failed_for_its_shape(Probe((), None, failed=checkpoint))
    assert not failed_for_its_shape(Probe(("batch_size=4096",), None, failed="OutOfMemoryError: CUDA out of memory"))
    assert not failed_for_its_shape(Probe(("compile=on",), None, cut=True, failed="cut at the time limit"))
    assert not failed_for_its_shape(Probe((), 12.0))


class Composes:
    """Hydra's config loader, for jobs that compose (what is composed is not read here)."""

    def load_sweep_config(self, master, overrides):
        return None


class ScriptedLauncher:
    """Hydra's launcher with a scripted outcome per launch: each job's results.json as the list says."""

    def __init__(self, root: Path, *outcomes: dict) -> None:
        self.root, self.outcomes, self.launched = root, list(outcomes), []

    def launch(self, batch, initial_job_idx):
        self.launched.append([list(job) for job in batch])
        returns = []
        for offset, _ in enumerate(batch):
            folder = run_folder(self.root, f"{initial_job_idx + offset}_job", self.outcomes.pop(0))
            hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
            returns.append(SimpleNamespace(status=JobStatus.COMPLETED, hydra_cfg=hydra_cfg, _return_value=None))
        return returns


def test_a_probe_failed_for_its_shape_runs_again_in_the_users_shape_and_counts_that_run(tmp_path):
    master = compose_tune(f"hydra.sweep.dir={tmp_path}", "val_every_images=1920", "batch_size=128")
    failed = results(status="failed", error=PLATEAU_ERROR)
    launcher = ScriptedLauncher(tmp_path, failed, results(images_per_s=9800.0))
    probe = LaunchMeasure(master, Composes(), launcher, kind="speed", probe=SPEED_PROBE)([("prefetch=on",)], 60.0)[0]
    assert probe.failed is None and probe.images_per_s == 9800.0 and not probe.tuners_own
    assert probe.wall_s >= 2 * 12.5  # both runs were paid for
    first, again = launcher.launched[0][0], launcher.launched[1][0]
    assert "~callbacks.last_checkpoint" in first and "~callbacks.last_checkpoint" not in again
    assert "val_every_images=1920" in again and PROBE_EPOCH_ENDS in again  # the user's own validation interval
    assert [o for o in first if o.startswith("train_images")] == [o for o in again if o.startswith("train_images")]


def test_a_probe_that_fails_for_its_shape_in_the_users_shape_too_is_the_tuners_problem_not_a_verdict(tmp_path):
    master = compose_tune(f"hydra.sweep.dir={tmp_path}")
    failed = results(status="failed", error=PLATEAU_ERROR)
    launcher = ScriptedLauncher(tmp_path, failed, failed)
    probe = LaunchMeasure(master, Composes(), launcher, kind="speed", probe=SPEED_PROBE)([("prefetch=on",)], 60.0)[0]
    assert probe.tuners_own and probe.failed.startswith("the tuner's run shape, not this configuration")
    step = Step("axes", "prefetch", ("prefetch=on",), ("prefetch=on",), (), [probe], [Probe((), 100.0)])
    decided = judge(step, compare_pooled([None], [100.0], 0.95), runs=1, max_runs=4, screen_factor=2.0)
    assert decided and step.verdict == UNMEASURED and "not this configuration" in step.note


@pytest.mark.slow
def test_a_probe_of_the_template_on_a_split_shorter_than_the_probe_completes(tmp_path):
    """lightning-hydra-template's MNISTLitModule (ReduceLROnPlateau on val/loss once an epoch) on a
    640-image training split, probed as the tuner probes it: more images than twice the split, its
    validation only at the end."""
    master = compose_tune("batch_size=64", "val_every_images=320")
    job = LaunchMeasure(master, None, None, kind="speed", probe=SPEED_PROBE).job_overrides((), limit_s=None)
    size = {o.split("=", 1)[0]: int(o.split("=", 1)[1]) for o in job if o.startswith(("train_images", "val_every"))}
    assert size["train_images"] == size["val_every_images"] > 2 * 640  # past two epoch ends, validating at its end
    command = [sys.executable, "-m", "segperf.train", "--config-dir", "configs", "model=mnist", "data=digits"]
    command += ["data.train_val_test_split=[640,128,128]", "batch_size=64", *QUIET, *job]
    command += [f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(command, cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["status"] == "completed" and record["tune_probe"]["images_per_s"] > 0
    moved = record["epoch_end_validation"]
    assert moved["epoch_batches"] == 10 and moved["watched_by"] == ["ReduceLROnPlateau(val/loss)"]


@pytest.mark.slow
def test_a_probe_of_the_template_with_a_users_early_stopping_runs_its_size_and_reads_as_a_full_probe(tmp_path):
    """lightning-hydra-template's MNISTLitModule on a 128-image split (2 batches an epoch), with the
    user's EarlyStopping(patience=0) on val/loss, which no validation can satisfy (min_delta 1000): it
    would end the probe at its second epoch end, long before the probe's timed steps."""
    master = compose_tune("batch_size=64", "val_every_images=128")
    job = LaunchMeasure(master, None, None, kind="speed", probe=SPEED_PROBE).job_overrides((), limit_s=600)
    stopper = "{_target_:lightning.pytorch.callbacks.EarlyStopping,monitor:val/loss,patience:0,min_delta:1000}"
    command = [sys.executable, "-m", "segperf.train", "--config-dir", "configs", "model=mnist", "data=digits"]
    command += ["data.train_val_test_split=[128,128,128]", "batch_size=64", *QUIET, *job]
    command += [f"+callbacks.users_early_stopping={stopper}", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(command, cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    held = record["epoch_end_validation"]["early_stopping"]
    assert held["callbacks"] == ["EarlyStopping(val/loss)"] and held["first_stop"]["step"] == 4
    assert record["tune_probe"]["stopped_by"] in ("precision", "cap")  # the probe's own end, not EarlyStopping's
    probe = probe_from_results((), tmp_path / "run", limited=True)  # as the tuner reads it
    assert probe.full_run and not probe.cut and probe.images_per_s > 0
