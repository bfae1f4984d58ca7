"""A whole training run leaves a correct record: results.json, summary, checkpoint, TensorBoard."""

import json
import re
import threading

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from segperf.training.run import train
from segperf.training.trainer import precision_notice
from tests.conftest import TINY_CARVANA_SUMMARY

RESULT_KEYS = {"status", "dataset", "train", "quality", "config"}


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory, tiny_carvana):
    from tests.conftest import NARROW_UNET, TINY, compose_config

    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose_config(*TINY, *NARROW_UNET, f"data.root={tiny_carvana}", "train_images=12", "val_every_images=8")
    results = train(cfg, run_dir)
    return run_dir, results


def test_run_writes_results_json_with_the_counts_of_the_run(baseline_run):
    run_dir, returned = baseline_run
    results = json.loads((run_dir / "results.json").read_text())
    assert results == json.loads(json.dumps(returned))
    assert RESULT_KEYS <= results.keys()
    assert results["status"] == "completed"
    assert results["dataset"] | {"root": None} == TINY_CARVANA_SUMMARY
    train = results["train"]
    assert (train["images"], train["steps"]) == (12, 3)
    assert train["wall_s"] > 0 and train["images_per_s"] > 0 and train["warmup_excluded"] is True
    assert results["config"]["train_images"] == 12 and results["config"]["data"]["train_images"] == 12


def test_quality_is_measured_at_the_end_of_training(baseline_run):
    _, results = baseline_run
    quality = results["quality"]
    assert 0.0 <= quality["val_pixel_accuracy"] <= 1.0
    assert 0.0 <= quality["val_dice"] <= 1.0
    assert quality["val_loss"] > 0


def test_no_temporary_files_are_left_next_to_the_results(baseline_run):
    run_dir, _ = baseline_run
    assert not list(run_dir.glob(".*.tmp"))
    summary = (run_dir / "summary.txt").read_text()
    assert "Trained on              12 images in 3 steps" in summary
    # the resource sampler's count says what it counts, beside the trained samples
    assert re.search(r"^Samples +[\d,]+ @ 50 ms \(utilization and memory readings\)$", summary, re.M)


def test_last_checkpoint_is_kept_and_loads_without_unpickling_code(baseline_run):
    run_dir, _ = baseline_run
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["net_config"]["level_channels"] == [8, 16, 32, 64, 128]  # the run's net (NARROW_UNET)
    assert ckpt["global_step"] == 3
    assert any(k.startswith("net.stem") for k in ckpt["state_dict"])


def test_tensorboard_gets_losses_metrics_and_sample_panels(baseline_run):
    run_dir, _ = baseline_run
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss", "val/loss", "val/pixel_accuracy", "val/dice"} <= scalars
    assert "val/samples" in events.Tags()["images"]
    panel = events.Images("val/samples")[-1]
    # one row per sample (batch of 4): image | true mask | predicted mask
    assert (panel.width, panel.height) == (3 * 96, 4 * 64)


def writer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if type(t).__name__ == "_AsyncWriterThread"}


def test_a_run_leaves_no_tensorboard_writer_open_and_its_measurements_on_disk(tmp_path, tiny_cfg):
    # segperf logs its measurements after Lightning has closed the logger (at the end of fit), which
    # reopens TensorBoard's writer: left open, its events waited for the writer's timed flush and
    # its thread outlived the run
    before = writer_threads()
    train(tiny_cfg("train_images=4"), tmp_path)
    assert writer_threads() - before == set()
    scalars = set(EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"])
    assert {"perf/train_samples_per_s", "phases/train_step_fraction", "resources/cpu_percent"} <= scalars


def test_a_failing_run_still_writes_results_with_the_error(tmp_path, tiny_cfg):
    cfg = tiny_cfg("val_images=50")
    with pytest.raises(ValueError, match="val_images=50"):
        train(cfg, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed"
    assert "val_images=50" in results["error"]


def test_image_size_not_divisible_by_16_stops_before_any_work(tmp_path, tiny_cfg):
    with pytest.raises(ValueError, match="data.height=72: .*multiple of 16"):
        train(tiny_cfg("data.height=72"), tmp_path)
    assert not (tmp_path / "checkpoints").exists()


def test_results_record_the_setting_of_every_axis(baseline_run):
    _, results = baseline_run
    assert results["axes"] == {
        "workers": 0,
        "prefetch": None,
        "pin": False,
        "upsample": "upconv",
        "memory_format": "nchw",
        "compile": False,
        "precision": "32-true",
        "threads": None,
        "decode": "full",
        "cache": "off",
        "augment": "off",
        "cold_cache": False,
        "batch_size": 4,
        "train_images": 12,
        "strategy": "auto",
        "devices": 1,
        "num_nodes": 1,
    }
    assert "distributed" not in results  # one process: no per-rank section
    assert results["device"] == "cpu" and results["precision"] == "32-true"


@pytest.mark.parametrize("option,expected", [("bf16", "bf16-mixed"), ("fp16", "16-mixed")])
def test_reduced_precision_trains_on_the_cpu_as_asked(tmp_path, tiny_cfg, option, expected):
    cfg = tiny_cfg(f"precision={option}", "memory_format=channels_last", "upsample=deconv")
    results = train(cfg, tmp_path)
    assert results["status"] == "completed"
    assert results["precision"] == expected
    # on a CPU that would emulate the type, the run says so and records it
    assert results["notices"] == [n for n in [precision_notice(expected, "auto")] if n]
    assert results["quality"]["val_loss"] > 0
