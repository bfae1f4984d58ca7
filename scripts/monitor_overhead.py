"""What PerfMonitor costs on a user's own model: the same training, measured and not, side by side.

    python scripts/monitor_overhead.py --repeats 3 --steps 300 --out outputs/monitor-overhead

Trains a small CNN (a user's LightningModule, written apart from segperf) on in-memory tensors
with `PerfMonitor()` and with `PerfMonitor(measure=False)`, which keeps only the few host
timestamps per batch the sample rate needs, alternating the two so that a machine getting busier
weighs on both alike. Prints each run's samples/s after warm-up, the medians and their ratio:
measured / unmeasured >= 0.99 is an overhead of at most 1%. The U-Net's counterpart is
`python -m segperf.train -m seed=0,1,2 perf.measure=true,false` and `segperf.report` on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from segperf import PerfMonitor


class SmallCnn(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def one_run(folder: Path, measure: bool, steps: int, batch_size: int) -> tuple[float, float | None]:
    """Samples/s of one run, and what measuring took by results.json (None unmeasured)."""
    generator = torch.Generator().manual_seed(0)
    samples = steps * batch_size
    data = TensorDataset(torch.randn(samples, 3, 32, 32, generator=generator), torch.randint(0, 10, (samples,)))
    trainer = L.Trainer(
        callbacks=[PerfMonitor(dirpath=folder, measure=measure, peak_probe=False)],
        max_epochs=1, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(SmallCnn(), DataLoader(data, batch_size=batch_size))
    results = json.loads((folder / "results.json").read_text())
    cost = results["measurement_cost"]["fraction"] if measure else None  # its own time, measured directly
    return results["train"]["images_per_s"], cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("outputs/monitor-overhead"))
    args = parser.parse_args()
    rates: dict[bool, list[float]] = {True: [], False: []}
    costs: list[float] = []
    for repeat in range(args.repeats):
        for measure in (True, False) if repeat % 2 == 0 else (False, True):  # alternate which goes first
            folder = args.out / f"{'measured' if measure else 'unmeasured'}-{repeat}"
            rate, cost = one_run(folder, measure, args.steps, args.batch_size)
            rates[measure].append(rate)
            if cost is not None:
                costs.append(cost)
            print(f"repeat {repeat} measure={measure}: {rates[measure][-1]:,.1f} samples/s", flush=True)
    measured, unmeasured = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median samples/s: measured {measured:,.1f}, unmeasured {unmeasured:,.1f}")
    print(f"measured / unmeasured = {measured / unmeasured:.4f} (overhead {1 - measured / unmeasured:+.2%})")
    print(f"measured directly (results.json measurement_cost.fraction), median: {statistics.median(costs):.2%}")


if __name__ == "__main__":
    main()
