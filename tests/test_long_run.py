"""A long run's record stays the same size: past its first steps PerfMonitor folds the timeline
into totals (segperf.perf.folding), and the figures are those of the whole run."""

from __future__ import annotations

import json
import time

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from segperf import PerfMonitor
from segperf.callbacks.long_run import RunFolder
from segperf.perf.folding import LogHistogram, distribution_of
from segperf.perf.jitter import distribution
from tests.test_perf_monitor import Classifier, Points

STEPS = 240


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.001)
        return grad


class Uneven(Classifier):
    """Forwards of 1-4 ms, one slow step in twenty: a distribution with a tail to fold. Backward
    and the optimizer step take a millisecond each too: the two monitors' hooks run one after the
    other, and on a busy machine that order alone moved a 0.3 ms backward by 5%."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.001 * (1 + batch_idx % 4) + (0.01 if batch_idx % 20 == 7 else 0.0))
        x, y = batch["features"], batch["label"]
        loss = nn.functional.cross_entropy(self.net(SlowBackward.apply(x.requires_grad_())), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        # The sleep goes in the optimizer's own step: LightningModule.optimizer_step runs the
        # closure (forward, backward) first, so a sleep there would land in forward and leave the
        # optimizer part at 0.2 ms, where the monitors' hook order moved it by 5% in CI.
        optimizer = super().configure_optimizers()
        optimizer.register_step_post_hook(lambda *_: time.sleep(0.001))
        return optimizer


def test_a_folded_run_reports_what_the_same_run_unfolded_reports(tmp_path):
    folding = PerfMonitor(dirpath=tmp_path / "folded", peak_probe=False)
    folding.long_run.head_steps, folding.long_run.chunk_steps = 16, 32
    holding = PerfMonitor(dirpath=tmp_path / "held", peak_probe=False)  # the same run, every step held
    trainer = L.Trainer(
        callbacks=[folding, holding], max_steps=STEPS, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", val_check_interval=100,
        limit_val_batches=2, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(
        Uneven(),
        DataLoader(Points(True, n=STEPS * 4, sleep_s=0.0002), batch_size=4),
        DataLoader(Points(True, n=8), batch_size=4),
    )
    folded, held = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("folded", "held"))
    assert folded["folded"]["steps"] >= 160 and "folded" not in held
    assert len(folded["jitter"]["per_batch"]["train_step_s"]) < STEPS - 150  # the lists hold the first and last steps
    assert folded["train"]["steps"] == held["train"]["steps"] == STEPS
    assert folded["train"]["images_per_s"] == pytest.approx(held["train"]["images_per_s"], rel=0.02)
    for phase in ("data_wait", "train_step", "validation", "framework"):
        assert folded["phases"][phase]["calls"] == held["phases"][phase]["calls"], phase
        assert folded["phases"][phase]["fraction"] == pytest.approx(held["phases"][phase]["fraction"], abs=0.01), phase
    assert folded["accounted"]["fraction"] == pytest.approx(1.0, abs=0.01)
    for part in ("forward", "backward", "optimizer_step"):
        mine, theirs = folded["phases"]["train_step"]["split"][part], held["phases"]["train_step"]["split"][part]
        assert theirs["wall_s"] >= 0.001 * theirs["calls"], part  # each part sleeps 1 ms: hook order is noise
        assert mine["calls"] == theirs["calls"] and mine["wall_s"] == pytest.approx(theirs["wall_s"], rel=0.05)
    per_batch = held["jitter"]["per_batch"]
    for name in ("train_step", "data_wait"):
        mine, theirs = folded["jitter"][name], held["jitter"][name]
        assert mine["count"] == theirs["count"] == STEPS - 2
        for key in ("mean", "max"):
            assert mine[key] == pytest.approx(theirs[key], rel=0.1, abs=2e-4), (name, key)
        # A quantile that falls in a gap between two clusters of steps is any value in the gap: a
        # histogram's and numpy's interpolation differ there by up to the gap (a CI run: a p90 of
        # 1.74 against 2.03 ms, with no step in between). So the folded quantile must lie among the
        # held steps of ranks within 3 points of it, widened by the other monitor's hook time.
        steady = np.asarray(per_batch[f"{name}_s"][per_batch["warmup_steps"] :])
        for key, q in (("p50", 50), ("p90", 90)):
            low, high = np.percentile(steady, [q - 3, q + 3])
            assert low * 0.9 - 2e-4 <= mine[key] <= high * 1.1 + 2e-4, (name, key, low, mine[key], high)
    assert folded["jitter"]["starved"]["steps"] == held["jitter"]["starved"]["steps"]
    assert folded["resources"]["cpu_mean_percent"] is not None
    assert folded["phases"]["train_step"]["cpu_mean_percent"] is not None


def test_the_histograms_quantiles_are_within_a_quarter_percent_and_the_moments_exact():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.lognormal(-6, 0.5, 50_000), rng.lognormal(-3, 0.3, 500)])
    histogram = LogHistogram()
    for chunk in np.array_split(values[:40_000], 7):  # folded chunk by chunk
        histogram.add(chunk)
    merged = distribution_of(histogram, values[40_000:].tolist())
    exact = distribution(values)
    assert merged["count"] == exact["count"]
    for key in ("mean", "std", "min", "max"):
        assert merged[key] == pytest.approx(exact[key], rel=1e-9)
    for key in ("p50", "p90", "p99"):
        assert merged[key] == pytest.approx(exact[key], rel=0.0025)


def test_folding_waits_for_warm_up_and_keeps_a_head_of_at_least_twice_its_steps():
    class Clock:
        warmup_steps, tap, marks = 600, object(), {}
        step_times = [(0.0, 1.0)] * 6000

    folder = RunFolder(Clock())
    assert folder.head == 1200 and not folder.due()  # warm-up has not ended
    Clock.marks = {"warmup_end": 1.0}
    assert folder.due()


@pytest.mark.slow
def test_the_long_run_script_reads_the_memory_and_the_records_size(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    script = [sys.executable, "scripts/long_run_record.py", "--steps", "6000", "--baseline-steps", "1000"]
    done = subprocess.run([*script, "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads((tmp_path / "long_run.json").read_text())
    assert measured["steps"] == 6000 and measured["results_json_bytes"] == (tmp_path / "results.json").stat().st_size
    assert [step for step, _ in measured["readings"]][0] == 1000 and len(measured["readings"]) >= 2
    assert json.loads((tmp_path / "results.json").read_text())["folded"]["steps"] > 0  # past 1,024 + 4,096 steps
    assert "6,000 steps: results.json" in done.stdout
