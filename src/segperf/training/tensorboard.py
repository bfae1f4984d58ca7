"""The run's TensorBoard logger: Lightning's, flushing its event file every few seconds instead of
after every logged step.

Lightning calls `logger.save()` after each `log_metrics`, and TensorBoardLogger's save flushes the
SummaryWriter, which waits for the writer's background thread to drain its queue and write the
file: a hand-off between two threads on a machine whose cores the training step keeps busy. On
the 2-core CPU that cost ~1 ms per training step at segperf's `log_every_n_steps: 5` (the MNIST
CNN at batch 2: 5.53 ms a step against 4.58 with logging every 100,000 steps; docs/BENCHMARKS.md),
more than the rest of the measurement together. Here a save flushes at most every `flush_secs`;
the SummaryWriter's own thread flushes on the same period (its `flush_secs`), so TensorBoard's
live view lags by at most that, and finalize (the end of fit and of the run's record) flushes
whatever is left. The hparams file is written by the first save, as Lightning's does.
"""

from __future__ import annotations

import time
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger as LightningTensorBoardLogger

FLUSH_SECS = 5.0


class TensorBoardLogger(LightningTensorBoardLogger):
    def __init__(self, save_dir: str | Path, *, flush_secs: float = FLUSH_SECS, **kwargs) -> None:
        # flush_secs also reaches the SummaryWriter (the logger's extra arguments are the writer's)
        super().__init__(save_dir, flush_secs=flush_secs, **kwargs)
        self.flush_secs = flush_secs
        self._flushed_at: float | None = None

    def save(self) -> None:
        now = time.monotonic()
        if self._flushed_at is None or now - self._flushed_at >= self.flush_secs:
            super().save()  # flushes and writes hparams.yaml when it is missing
            self._flushed_at = now

    def finalize(self, status: str) -> None:
        self._flushed_at = None  # the save Lightning makes at the end writes whatever is missing
        super().finalize(status)
