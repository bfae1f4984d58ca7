"""The default U-Net recipe learns: a short training on generated data lowers the validation loss
and scores far above what any constant prediction can (all background, all car); the run says
how far quality came, TensorBoard shows the schedule and a predicted mask like the true one; the
run sizes set what they say, and `size=seed` stays the seed's plain net."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torchmetrics.segmentation import DiceScore

from segperf.callbacks import ValidationMetrics
from segperf.model import SegmentationModule, UNet
from segperf.model.optim import configure_adam
from segperf.training.run import train
from tests.conftest import QUIET, compose_config

# The default run's recipe and net (size=demo: 64x96 input, BatchNorm, lr 3e-3 on a one-cycle
# schedule) on the tiny generated cars: 48 steps of 4 images, validated 4 times on the 16 views of
# the held-out car. One thread: on a shared machine it is several times faster than two, which
# wait for each other at every operation.
LEARN = ["train_images=192", "batch_size=4", "val_images=16", "val_every_images=48", "num_threads=1", *QUIET]


@pytest.fixture(scope="module")
def learned(tmp_path_factory, tiny_carvana):
    """The run, and what constant predictions of its validation masks would score."""
    cfg = compose_config(*LEARN, f"data.root={tiny_carvana}")
    run_dir = tmp_path_factory.mktemp("learn")
    results = train(cfg, run_dir)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    masks = torch.cat([mask for _, mask in datamodule.val_dataloader()]).long()
    car = masks.float().mean().item()
    dice = DiceScore(2, include_background=False, average="micro", input_format="index")
    constant = {
        "car_fraction": car,
        # the best constant prediction's loss: the entropy of the class frequencies
        "best_loss": -(car * math.log(car) + (1 - car) * math.log(1 - car)),
        "background_accuracy": 1 - car,  # all background: Dice 0
        "all_car_dice": float(dice(torch.ones_like(masks), masks)),
    }
    return run_dir, results, constant, cfg


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_a_short_training_lowers_the_validation_loss_below_any_constant_prediction(learned):
    _, results, constant, _ = learned
    assert results["status"] == "completed"
    history = results["quality"]["val_history"]
    assert [entry["step"] for entry in history] == [12, 24, 36, 48]
    first, last = history[0]["val_loss"], history[-1]["val_loss"]
    assert last < first
    assert last < 0.5 * constant["best_loss"], (history, constant)


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_dice_and_pixel_accuracy_are_far_above_all_background_and_all_car(learned):
    _, results, constant, _ = learned
    quality = results["quality"]
    assert 0.05 < constant["car_fraction"] < 0.5 and constant["all_car_dice"] < 0.6  # cars, not the whole image
    assert quality["val_dice"] > max(0.8, constant["all_car_dice"] + 0.3), (quality, constant)
    # fewer than half the wrong pixels of an all-background prediction
    assert 1 - quality["val_pixel_accuracy"] < 0.5 * constant["car_fraction"], (quality, constant)


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_the_record_and_summary_say_how_far_quality_came(learned):
    run_dir, results, _, _ = learned
    quality = results["quality"]
    first, last = quality["val_history"][0], quality["val_history"][-1]
    assert (quality["first_val_dice"], quality["first_val_loss"]) == (first["val_dice"], first["val_loss"])
    assert quality["val_dice"] == pytest.approx(last["val_dice"])
    assert json.loads((run_dir / "results.json").read_text())["quality"] == quality
    lines = (run_dir / "summary.txt").read_text().splitlines()
    # each metric under its own name, first -> last; the one the run is judged by first, and marked
    dice = f"val_dice (max: the run's quality) {first['val_dice']:.4f} -> {last['val_dice']:.4f}"
    loss = next(row for row in lines if row.startswith("val_loss "))
    assert dice in lines and loss.endswith(f"{first['val_loss']:.4f} -> {last['val_loss']:.4f}")
    assert any(row.startswith("Validations") and row.endswith("4 (step 12 -> 48)") for row in lines)


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_tensorboard_shows_the_one_cycle_learning_rate_at_every_step(learned):
    run_dir, _, _, cfg = learned
    events = EventAccumulator(str(run_dir)).Reload()
    lrs = [event.value for event in events.Scalars("lr-Adam")]
    assert len(lrs) == 48
    peak = max(lrs)
    assert peak == pytest.approx(cfg.model.lr, rel=0.05)
    assert 0 < lrs.index(peak) < 47  # warms up, then anneals
    assert lrs[0] < peak / 10 and lrs[-1] < peak / 100


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_the_last_sample_panel_shows_a_predicted_mask_like_the_true_one(learned):
    run_dir, _, _, _ = learned
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload()
    panel = events.Images("val/samples")[-1]  # image | true mask | predicted mask, one row per sample
    pixels = np.asarray(_decode_png(panel.encoded_image_string))[..., 0] > 127
    width = panel.width // 3
    true, pred = pixels[:, width : 2 * width], pixels[:, 2 * width :]
    assert true.mean() > 0.05  # the panel's samples show a car
    overlap = 2 * (true & pred).sum() / (true.sum() + pred.sum())
    assert overlap > 0.8


@pytest.mark.slow  # one real training (~20-30 s), shared by the tests that read it
def test_the_checkpoint_keeps_the_history_and_the_schedule_so_a_resumed_run_goes_on_from_them(learned):
    run_dir, results, _, _ = learned
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    history = results["quality"]["val_history"]
    kept = checkpoint["callbacks"]["ValidationMetrics"]["history"]
    assert kept == history  # saved at the last validation, that one included
    (schedule,) = checkpoint["lr_schedulers"]
    assert (schedule["total_steps"], schedule["last_epoch"]) == (48, 48)
    resumed = ValidationMetrics()
    resumed.load_state_dict(checkpoint["callbacks"]["ValidationMetrics"])
    assert resumed.history == history  # a resumed run's first validation is still the run's first


def _decode_png(data: bytes):
    import io

    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


# -- what the run sizes set -----------------------------------------------------------------------


@pytest.mark.parametrize("size", ["demo", "quick"])
def test_demo_and_quick_train_the_normalized_net_on_a_one_cycle_schedule_at_64x96(size):
    cfg = compose_config(f"size={size}")
    assert (cfg.data.height, cfg.data.width, cfg.model.net.norm) == (64, 96, "batch")
    assert cfg.model.scheduler._target_ == "torch.optim.lr_scheduler.OneCycleLR"
    assert cfg.model.scheduler.max_lr == cfg.model.lr == 3e-3
    assert cfg.data.val_images <= 32  # the built-in data holds out 2 cars: 32 views


def test_size_seed_is_the_seeds_plain_net_and_run_unchanged():
    cfg = compose_config("size=seed")
    assert (cfg.train_images, cfg.val_images, cfg.batch_size, cfg.val_every_images) == (3000, 60, 6, 500)
    assert (cfg.data.height, cfg.data.width) == (256, 384)
    assert (cfg.model.net.norm, cfg.model.lr, cfg.model.scheduler) == ("none", 1e-4, None)
    net = instantiate(cfg.model.net)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in UNet().parameters())


def test_every_setting_of_the_recipe_can_be_set_back_from_the_command_line():
    cfg = compose_config("model.net.norm=none", "model.scheduler=null", "model.lr=1e-4", "data.height=256")
    assert (cfg.model.net.norm, cfg.model.scheduler, cfg.model.lr, cfg.data.height) == ("none", None, 1e-4, 256)
    assert compose_config("model.net.norm=group").model.net.norm == "group"


def test_the_cpu_study_composes_with_every_run_size():
    for size in ("demo", "quick", "mnist"):
        cfg = compose_config("model=cnn", "data=mnist", f"size={size}")
        assert "norm" not in cfg.model.net and "height" not in cfg.data


def test_a_schedule_needing_the_run_length_gets_the_trainers_step_count():
    module = SegmentationModule(UNet(stem_channels=4, level_channels=[4, 8]), lr=0.01)
    module.scheduler = instantiate(compose_config().model.scheduler)  # the config's partial OneCycleLR
    module.trainer = SimpleNamespace(estimated_stepping_batches=40)  # what Lightning computes per rank
    configured = configure_adam(module, module.lr, module.scheduler)
    schedule = configured["lr_scheduler"]
    assert schedule["interval"] == "step" and schedule["scheduler"].total_steps == 40
    assert isinstance(configured["optimizer"], torch.optim.Adam)
    assert configure_adam(module, 0.01, None).__class__ is torch.optim.Adam  # no schedule: the seed's
