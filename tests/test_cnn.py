"""model=cnn: the CPU study's CNN learns the built-in digits, and a run of it is measured and
recorded like a U-Net run (phases, throughput with FLOPs, verdict), with accuracy as its quality."""

import json

import pytest
import torch
import torch.nn.functional as F
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

from segperf.data.mnist.datamodule import read_split
from segperf.model.cnn import ClassificationModule, DigitCNN
from segperf.schema import problems_in
from segperf.training.run import train
from tests.conftest import MNIST_TINY, compose_config


def test_the_cnn_learns_tiny_builtin_digits_above_chance_in_a_few_steps(tiny_mnist):
    torch.manual_seed(0)
    module = ClassificationModule(DigitCNN())
    optimizer = module.configure_optimizers()
    train_x, train_y = module.on_after_batch_transfer(read_split(tiny_mnist, "train"), 0)
    test_x, test_y = module.on_after_batch_transfer(read_split(tiny_mnist, "test"), 0)
    assert train_x.shape == (256, 1, 28, 28) and train_x.dtype == torch.float32
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small steps: one thread is fastest on a shared machine
    try:
        losses = []
        for step in range(20):  # 20 steps of 32: 2.5 passes over 256 images
            batch = torch.arange(step * 32, step * 32 + 32) % 256
            loss = F.cross_entropy(module(train_x[batch]), train_y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        module.eval()
        with torch.no_grad():
            accuracy = (module(test_x).argmax(dim=1) == test_y).float().mean().item()
    finally:
        torch.set_num_threads(threads)
    assert accuracy > 0.3  # chance is 0.1; held-out digits
    assert sum(losses[-5:]) < sum(losses[:5])


def test_the_cnn_is_the_seeds_conv_batchnorm_relu_pool_then_dropout_classifier():
    net = instantiate(compose_config("model=cnn").model.net)
    kinds = [type(m).__name__ for m in net.modules()]
    for kind in ("Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "Linear", "Dropout"):
        assert kind in kinds
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert "(64, 7, 7)" in net.describe(28, 28)


def test_size_mnist_is_the_seeds_run_and_batch_size_stays_sweepable():
    cfg = compose_config("model=cnn", "data=mnist", "size=mnist", "batch_size=512", "data.num_workers=4")
    assert (cfg.train_images, cfg.val_images, cfg.val_every_images) == (60000, 10000, 60000)
    assert (cfg.data.batch_size, cfg.data.num_workers) == (512, 4)
    assert compose_config("size=mnist").batch_size == 64  # the seed's baseline
    assert compose_config().model.net._target_.endswith("UNet")  # the U-Net stays the default


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory, tiny_mnist):
    run_dir = tmp_path_factory.mktemp("cnn-run")
    cfg = compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", "profile=counters")
    return run_dir, train(cfg, run_dir)


def test_a_cnn_run_records_accuracy_the_split_and_its_flops(cnn_run):
    run_dir, results = cnn_run
    assert results["status"] == "completed"
    quality = results["quality"]
    logged = {"val_accuracy", "val_loss", "first_val_accuracy", "first_val_loss", "val_history"}
    assert set(quality) == logged | {"metric", "mode", "label"}
    # judged by the accuracy the module declares (segperf.quality), named as the report's column names it
    assert (quality["metric"], quality["mode"], quality["label"]) == ("val_accuracy", "max", "val accuracy")
    assert 0.0 <= quality["val_accuracy"] <= 1
    # validated once, at the end: the first validation is the last
    assert quality["val_history"] == [{"step": 4, **{k: quality[k] for k in ("val_accuracy", "val_loss")}}]
    assert results["dataset"]["classes"] == 10 and results["dataset"]["train_images"] == 256
    assert results["train"]["images"] == 128 and results["train"]["images_per_s"] > 0
    assert results["throughput"]["train_flops_per_image"] > results["throughput"]["val_flops_per_image"] > 1e6
    assert {"data_wait", "train_step"} <= results["phases"].keys() and results["verdict"]["kind"]
    assert results["axes"]["batch_size"] == 32
    assert json.loads((run_dir / "results.json").read_text())["quality"] == results["quality"]
    summary = (run_dir / "summary.txt").read_text()
    assert "val_accuracy (max: the run's quality)" in summary and "10 classes" in summary and "Dice" not in summary


def test_profile_counters_records_counts_or_one_line_why_not(cnn_run):
    run_dir, results = cnn_run
    counters = results["counters"]
    if counters["available"]:
        assert counters["cycles"] > 0 and counters["instructions"] > 0 and counters["ipc"] > 0
    else:
        assert counters["reason"] and "\n" not in counters["reason"]
        assert f"n/a: {counters['reason']}" in (run_dir / "summary.txt").read_text()


def test_the_cpu_study_workload_has_no_unet_or_carvana_keys():
    cfg = compose_config("model=cnn", "data=mnist", "size=mnist")
    assert not {"decode", "cache", "augment"} & set(cfg.data) and "upsample" not in cfg.model.net
    assert problems_in(cfg) == []
    assert problems_in(compose_config("model=cnn", "data=mnist", "memory_format=channels_last")) == []


@pytest.mark.parametrize("axis", ["upsample=deconv", "cache=memory", "decode=reduced", "augment=basic"])
def test_unet_and_carvana_only_axes_are_refused_for_the_cnn_while_composing(axis):
    # (+opt=all composes here: its workload-scoped choices apply only where the group exists)
    refused = f"Could not override '{axis.split('=')[0]}'. No match in the defaults list"
    with pytest.raises(ConfigCompositionException, match=refused):
        compose_config("model=cnn", "data=mnist", axis)


def test_cnn_range_problems_are_named_with_what_is_allowed():
    cfg = compose_config("model=cnn", "data=mnist", "model.net.dropout=1.0", "model.net.channels=[8,16,32]")
    assert problems_in(cfg) == [
        "model.net.dropout=1.0: must be >= 0 and < 1, e.g. 0.25",
        "model.net.channels=[8, 16, 32]: each block halves the 28x28 digits, which must halve exactly: "
        "at most 2 blocks, e.g. [32, 64]",
    ]


@pytest.mark.slow
def test_a_cpu_study_sweep_over_batch_size_and_workers_gets_a_report(tiny_mnist, tmp_path):
    from segperf.report import main as report_main
    from tests.conftest import run_cli

    sweep = tmp_path / "sweep"
    args = [*MNIST_TINY, f"data.root={tiny_mnist}", "train_images=64", "val_images=32"]
    done = run_cli(["-m", *args, "batch_size=16,32", "data.num_workers=0,1", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert report_main([str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    for label in ("batch_size=16, data.num_workers=0", "batch_size=32, data.num_workers=1"):
        assert f"| {label} " in report
    assert "| val accuracy |" in report and "None: every job completed." in report
