"""The training loss reaches the loggers at the same steps, with the same values, as when it was
logged at every step, while `self.log` runs only at the steps the logger writes."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset

from segperf.model.cnn import ClassificationModule, DigitCNN
from segperf.model.step_logging import TRAIN_LOSS

STEPS, BATCH = 11, 4


class RecordingLogger(Logger):
    """Keeps what Lightning hands a logger: {step: {name: value}}."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[int, dict[str, float]] = {}

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics, step=None) -> None:
        self.written.setdefault(step, {}).update(metrics)

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


class EveryStepModule(ClassificationModule):
    """The loss logged at every step, as before: the reference."""

    def log_train_loss(self, loss, batch_size) -> None:
        self.log(TRAIN_LOSS, loss, on_step=True, batch_size=batch_size)


class CountingModule(ClassificationModule):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.loss_logs = 0

    def log(self, name, *args, **kwargs) -> None:
        self.loss_logs += name == TRAIN_LOSS
        super().log(name, *args, **kwargs)


class StopAt(L.Callback):
    """Stops the run after step `step` (1-based), as the tuner's screening callback does."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx + 1 == self.step:
            trainer.should_stop = True


def train_losses(module_class, log_every_n_steps: int, callbacks=()) -> tuple[dict[int, float], ClassificationModule]:
    torch.manual_seed(0)
    images = torch.randint(0, 256, (STEPS * BATCH, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (STEPS * BATCH,))
    module = module_class(DigitCNN(channels=[4], hidden=8))
    logger = RecordingLogger()
    trainer = L.Trainer(
        max_epochs=1,
        logger=logger,
        callbacks=list(callbacks),
        log_every_n_steps=log_every_n_steps,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        accelerator="cpu",
    )
    trainer.fit(module, DataLoader(TensorDataset(images, labels), batch_size=BATCH))
    return {step: row[TRAIN_LOSS] for step, row in logger.written.items() if TRAIN_LOSS in row}, module


@pytest.mark.parametrize("log_every_n_steps", [1, 3, 5])
def test_train_loss_reaches_the_logger_at_the_same_steps_with_the_same_values(log_every_n_steps):
    reference, _ = train_losses(EveryStepModule, log_every_n_steps)
    logged, _ = train_losses(ClassificationModule, log_every_n_steps)
    assert reference, "the reference run wrote no train/loss"
    assert logged.keys() == reference.keys()
    assert logged == pytest.approx(reference)


def test_train_loss_is_logged_only_at_the_steps_the_logger_writes():
    logged, module = train_losses(CountingModule, log_every_n_steps=5)
    assert module.loss_logs == len(logged) == STEPS // 5


def test_a_run_stopped_by_a_callback_writes_that_steps_loss():
    # step 4 is not one the logger writes every 5 steps; Lightning writes the step a run stops at
    reference, _ = train_losses(EveryStepModule, 5, [StopAt(4)])
    logged, _ = train_losses(ClassificationModule, 5, [StopAt(4)])
    assert 3 in reference  # Lightning's step numbers start at 0
    assert logged == pytest.approx(reference)
