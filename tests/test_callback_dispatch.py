"""Lightning's per-batch hooks reach only the callbacks that act in them (segperf.training.callback_dispatch)."""

from collections import Counter

import lightning as L
import torch
from lightning.pytorch.profilers import Profiler
from torch.utils.data import DataLoader, TensorDataset

from segperf.training.callback_dispatch import BATCH_HOOKS, skip_empty_batch_hooks


class TinyModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(12, 4), torch.randn(12, 1)), batch_size=2)


class EveryBatch(L.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches += 1


class AtTheEnds(L.Callback):
    def __init__(self) -> None:
        self.ends = 0

    def on_fit_start(self, trainer, pl_module) -> None:
        self.ends += 1

    def on_fit_end(self, trainer, pl_module) -> None:
        self.ends += 1


class Actions(Profiler):
    """Counts the actions Lightning profiles."""

    def __init__(self) -> None:
        super().__init__()
        self.started = Counter()

    def start(self, action_name: str) -> None:
        self.started[action_name] += 1

    def stop(self, action_name: str) -> None:
        pass

    def summary(self) -> str:
        return ""


def fit(tmp_path, *callbacks: L.Callback) -> Actions:
    actions = Actions()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        callbacks=list(callbacks),
        profiler=actions,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    skip_empty_batch_hooks(trainer.callbacks)
    trainer.fit(TinyModule())
    return actions


def test_a_callback_still_gets_the_hooks_it_acts_in_and_no_empty_ones(tmp_path):
    every, ends = EveryBatch(), AtTheEnds()
    actions = fit(tmp_path, every, ends)
    assert every.batches == 6 and ends.ends == 2  # what each callback does is unchanged
    assert actions.started["[Callback]EveryBatch.on_train_batch_end"] == 6
    assert actions.started["[Callback]AtTheEnds.on_fit_start"] == 1
    ends_hooks = [name for name in actions.started if name.startswith("[Callback]AtTheEnds.")]
    assert ends_hooks and not [name for name in ends_hooks if "batch" in name]
    assert "[Callback]EveryBatch.on_before_backward" not in actions.started
    # Lightning's checkpoint callback acts at batch ends and keeps doing so: it still writes its checkpoint
    assert any("ModelCheckpoint" in name and name.endswith("on_train_batch_end") for name in actions.started)
    assert list((tmp_path / "checkpoints").glob("*.ckpt"))


def test_only_inherited_no_ops_are_skipped():
    every, ends = EveryBatch(), AtTheEnds()
    skipped = skip_empty_batch_hooks([every, ends])
    assert "on_train_batch_end" not in skipped["EveryBatch"]
    assert skipped["AtTheEnds"] == list(BATCH_HOOKS)
    assert callable(every.on_train_batch_end) and every.on_train_batch_start is None
    assert AtTheEnds.on_train_batch_end is L.Callback.on_train_batch_end  # the class is left alone
    assert skip_empty_batch_hooks([every, ends]) == {}  # twice is once


def test_segperf_runs_dispatch_no_empty_batch_hooks(tmp_path, tiny_mnist):
    from segperf.training.run import train
    from tests.conftest import MNIST_TINY, compose_config

    cfg = compose_config(*MNIST_TINY, f"data.root={tiny_mnist}")
    results = train(cfg, tmp_path)
    assert results["status"] == "completed"
    profile = (tmp_path / "fit-lightning-profile.txt").read_text()
    assert "LearningRateMonitor.on_train_batch_start" in profile  # its hook: still called
    assert "LearningRateMonitor.on_before_backward" not in profile
    assert "InterruptCheckpoint.on_train_batch_end" not in profile
