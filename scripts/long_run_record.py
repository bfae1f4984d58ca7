"""PerfMonitor through a long run: is its record (results.json) and its memory bounded?

    python scripts/long_run_record.py --steps 1000000 --out outputs/long-run

Trains Lightning's own BoringModel (lightning.pytorch.demos.boring_classes) for `--steps` steps
with `PerfMonitor()` in its Trainer (no logger, checkpoint or progress bar, so that what grows is
PerfMonitor's) and reads the process's resident memory (RSS) from a callback: after
`--baseline-steps` steps (the run's set-up, the first steps PerfMonitor holds exactly, the
allocator's pools all in place) and then every tenth of the run. Prints a line per reading,
then results.json's size, the growth from the baseline to the end and to the highest reading,
and writes them to `long_run.json` in `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import lightning as L
import psutil
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

from segperf import PerfMonitor

MIB = 2**20


class ReadMemory(L.Callback):
    def __init__(self, baseline_steps: int, every: int) -> None:
        self.baseline_steps, self.every = baseline_steps, every
        self.process = psutil.Process(os.getpid())
        self.readings: list[tuple[int, float]] = []
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self.baseline_steps or (step > self.baseline_steps and step % self.every == 0):
            rss = self.process.memory_info().rss / MIB
            self.readings.append((step, rss))
            print(f"step {step:>9,}  RSS {rss:8.1f} MiB  ({time.perf_counter() - self.started:7.1f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--baseline-steps", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path("outputs/long-run"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # BoringModel's weights shrink towards denormal floats over ~100,000 SGD steps, where a CPU's
    # matmul runs 10-100x slower: flushed to zero, its steps stay the same length all run long
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)  # a 32x2 layer: one thread, no intra-op hand-offs (a million steps in minutes)
    baseline = min(args.baseline_steps, args.steps // 2)
    memory = ReadMemory(baseline, max(1, args.steps // 10))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[PerfMonitor(dirpath=args.out, peak_probe=False), memory],
    )
    # one epoch for the whole run: 2 samples a batch from 100,000 (epochs end every 50,000 steps)
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 100_000), batch_size=2))
    size = (args.out / "results.json").stat().st_size
    (_, first), (_, last) = memory.readings[0], memory.readings[-1]
    peak = max(rss for _, rss in memory.readings)
    result = {
        "steps": args.steps,
        "results_json_bytes": size,
        "rss_baseline_mib": first,
        "rss_end_mib": last,
        "growth_mib": last - first,
        "peak_growth_mib": peak - first,
        "readings": memory.readings,
    }
    (args.out / "long_run.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.steps:,} steps: results.json {size / MIB:.2f} MiB; RSS {first:.1f} MiB at step "
        f"{memory.readings[0][0]:,}, {last:.1f} MiB at the end: growth {last - first:+.1f} MiB "
        f"(highest {peak - first:+.1f} MiB)"
    )


if __name__ == "__main__":
    main()
