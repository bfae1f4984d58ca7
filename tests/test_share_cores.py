"""ShareCores: on a CPU, torch's threads leave DataLoader workers that keep cores busy their cores,
measured after the warm-up; workers that idle, given threads and runs without workers keep theirs."""

from __future__ import annotations

import os
import tempfile
import time

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from segperf import PerfMonitor
from segperf.callbacks import ShareCores
from segperf.callbacks.phase_clock import PhaseClock

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


class Spinning(Dataset):
    """Samples that cost `spin_s` of CPU each to make, as a PIL decode-and-augment does."""

    def __init__(self, spin_s: float, n: int = 96) -> None:
        self.spin_s, self.n = spin_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.perf_counter() + self.spin_s
        while time.perf_counter() < end:
            pass
        return torch.full((8,), float(i % 7)), torch.tensor(i % 2)


class Tiny(L.LightningModule):
    """`step_s` per step stands for a net that takes longer than the loader, whose workers then rest."""

    def __init__(self, step_s: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Linear(8, 2)
        self.step_s = step_s

    def training_step(self, batch, batch_idx):
        time.sleep(self.step_s)
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(autouse=True)
def torch_threads_restored():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def fit(share: ShareCores, spin_s: float, workers: int = 2, steps: int = 12, step_s: float = 0.0) -> dict:
    monitor = PerfMonitor(dirpath=tempfile.mkdtemp(), warmup_steps=1, peak_probe=False)
    trainer = L.Trainer(
        callbacks=[monitor, share],
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    loader = DataLoader(Spinning(spin_s), batch_size=4, num_workers=workers)
    trainer.fit(Tiny(step_s), loader)
    results: dict = {"notices": []}
    monitor.record(results)
    share.record(results)
    return results


@pytest.mark.slow
@pytest.mark.serial  # alone: beside another test worker's process the DataLoader workers kept 0.40 of a core (CI)
def test_workers_that_keep_cores_busy_get_them_and_the_measuring_steps_join_the_warm_up():
    torch.set_num_threads(CORES)  # torch's default: one thread per core
    results = fit(ShareCores(measure_steps=3, warmup_steps=1), spin_s=0.02)
    section = results["share_cores"]
    # 2 workers that never rest keep up to 2 cores busy (less where other tests share them),
    # beside one torch thread per core
    assert section["workers_cores"] >= 0.5, section
    expected = max(1, int(CORES - section["workers_cores"] + 0.5))
    assert section["applied"] and section["threads_before"] == CORES and section["threads_after"] == expected
    assert torch.get_num_threads() == expected and results["torch_threads"] == expected
    assert f"torch threads {CORES} -> {expected} after the warm-up" in results["notices"][0]
    assert results["train"]["warmup_steps"] == 1 + 3  # images/s is of the steps run with the threads kept


def test_workers_that_rest_keep_torchs_threads():
    torch.set_num_threads(CORES)
    results = fit(ShareCores(measure_steps=3, warmup_steps=1), spin_s=0.001, step_s=0.05)
    section = results["share_cores"]
    assert not section["applied"] and section["workers_cores"] < 0.5 and section["threads_after"] == CORES
    assert torch.get_num_threads() == CORES and results["notices"] == []


@pytest.mark.parametrize(
    ("share", "workers", "reason"),
    [
        (ShareCores(num_threads=1), 2, "num_threads=1 was given"),
        (ShareCores(), 0, "no DataLoader workers"),
        (ShareCores(warmup_steps=1), 2, "the run has 4 steps: too few to measure beyond its warm-up"),
    ],
)
def test_given_threads_and_runs_without_workers_are_left_alone_with_the_reason(share, workers, reason):
    torch.set_num_threads(CORES)
    results = fit(share, spin_s=0.0, workers=workers, steps=4)
    assert not results["share_cores"]["applied"] and results["share_cores"]["reason"].startswith(reason)
    assert results["train"]["warmup_steps"] == 1 and torch.get_num_threads() == CORES


def test_the_warm_up_can_only_grow_before_the_first_step_ends():
    clock = PhaseClock(warmup_steps=0)
    clock.marks["warmup_end"] = 1.0  # warmup_steps=0 marks it at train start
    clock.extend_warmup(3)
    assert clock.warmup_steps == 3 and "warmup_end" not in clock.marks
    clock.steps = 1
    with pytest.raises(RuntimeError, match="ask before it"):
        clock.extend_warmup(1)
