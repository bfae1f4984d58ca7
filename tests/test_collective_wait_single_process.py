"""A single-process fit, compiled with torch.compile, under PerfMonitor: torch.distributed's
functions stay torch's own for the whole fit (CollectiveWait wraps them only where ranks can meet:
a process group of two or more), so nothing of the timing reaches the compiled step or the record."""

from __future__ import annotations

import lightning as L
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from segperf import PerfMonitor
from segperf.perf.collectives import COLLECTIVES


def own_functions() -> dict:
    return {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}


class Compiled(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1)), backend="eager")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SeesTheFunctions(L.Callback):
    """What torch.distributed's collectives are in the middle of each training step."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.seen.append(own_functions())


def test_a_compiled_single_process_fit_runs_with_torchs_own_collectives(tmp_path):
    assert not dist.is_initialized()
    before = own_functions()
    sees, monitor = SeesTheFunctions(), PerfMonitor(dirpath=tmp_path, warmup_steps=1, peak_probe=False)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=6,
        callbacks=[monitor, sees],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Compiled(), DataLoader(data, batch_size=8))
    assert len(sees.seen) == 6 and all(seen == before for seen in sees.seen)  # never wrapped, not even for a step
    assert monitor.collectives.state.startswith("not measured: a single process")
    results = (tmp_path / "results.json").read_text()
    assert '"status": "completed"' in results and "collective_wait" not in results
