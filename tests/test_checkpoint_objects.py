"""Checkpoints of modules that keep objects in their hyperparameters (lightning-hydra-template's
MNISTLitModule saves its `net` nn.Module, its `_partial_` optimizer and scheduler): the run writes a
weights-only copy beside each, which segperf.infer reads, never running code from a file; a
checkpoint it must refuse is refused in one line that says what to do."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from segperf.inference.checkpoint import InferenceError, read_checkpoint
from segperf.training.checkpoints import AtomicCheckpointIO, needs_code_to_load, weights_copy
from tests.conftest import QUIET
from tests.test_outside_projects import TEMPLATE


def lightning_checkpoint(**hyper_parameters) -> dict:
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    state = {f"net.{k}": v for k, v in net.state_dict().items()}
    return {"epoch": 1, "global_step": 8, "state_dict": state, "hyper_parameters": hyper_parameters}


def test_a_checkpoint_holding_a_net_and_partial_optimizer_gets_a_weights_only_copy_infer_reads(tmp_path):
    path = tmp_path / "checkpoints" / "last.ckpt"
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    checkpoint = lightning_checkpoint(net=net, optimizer=functools.partial(torch.optim.Adam, lr=0.001), compile=False)
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    assert needs_code_to_load(path) and weights_copy(path).name == "last.weights.pt"
    read = read_checkpoint(path)
    assert read["state_dict"].keys() == checkpoint["state_dict"].keys()
    assert torch.equal(read["state_dict"]["net.0.weight"], checkpoint["state_dict"]["net.0.weight"])
    assert read["global_step"] == 8 and "hyper_parameters" not in read  # the objects stay out of the copy


def test_a_plain_checkpoint_gets_no_copy_and_a_stale_one_is_removed(tmp_path):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint(lightning_checkpoint(net=nn.Linear(2, 2)), path)
    assert weights_copy(path).is_file()
    io.save_checkpoint(lightning_checkpoint(lr=0.001, sizes=[64, 128]), path)  # plain hyperparameters now
    assert not weights_copy(path).exists() and read_checkpoint(path)["hyper_parameters"]["sizes"] == [64, 128]
    io.save_checkpoint(lightning_checkpoint(net=nn.Linear(2, 2)), path)
    io.remove_checkpoint(path)  # ModelCheckpoint's save_top_k dropping a checkpoint drops its copy too
    assert not path.exists() and not weights_copy(path).exists()


def test_a_checkpoint_with_objects_and_no_copy_or_an_older_one_is_refused_in_one_line(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save(lightning_checkpoint(net=nn.Linear(2, 2)), path)
    with pytest.raises(InferenceError) as error:
        read_checkpoint(path)
    said = str(error.value)
    assert "\n" not in said and "Weights only load failed" not in said
    assert "torch.nn.modules.linear.Linear" in said and "has no last.weights.pt beside it" in said
    assert "run_dir=" in said and "save_hyperparameters(ignore=" in said
    # a copy written before the checkpoint is of other weights: not read
    torch.save({"state_dict": {}}, weights_copy(path))
    stamp = path.stat().st_mtime_ns
    os.utime(weights_copy(path), ns=(stamp - 10**9, stamp - 10**9))
    with pytest.raises(InferenceError, match="its last.weights.pt is older than it"):
        read_checkpoint(path)


@pytest.mark.slow
def test_infer_reads_the_weights_of_a_template_run_that_saves_its_net_in_hyperparameters(tmp_path):
    """The template's MNISTLitModule saves `net` (an nn.Module) in its hyperparameters: segperf.infer
    run_dir=<its segperf.train run> completes and reports the inference rate."""
    run = tmp_path / "run"
    train = [sys.executable, "-m", "segperf.train", "--config-dir", "configs", "model=mnist", "data=digits"]
    train += ["data.train_val_test_split=[512,128,128]", "train_images=256", "val_images=64", "batch_size=64"]
    train += ["val_every_images=128", "perf.peak_probe=false", *QUIET, f"hydra.run.dir={run}"]
    done = subprocess.run(train, cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "checkpoints" / "last.weights.pt").is_file()
    out = tmp_path / "infer"
    infer = [sys.executable, "-m", "segperf.infer", f"run_dir={run}", f"hydra.run.dir={out}"]
    done = subprocess.run(infer, cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "completed" and results["inference"]["model_images_per_s"] > 0
