"""The inference benchmark on every model segperf trains, not only the U-Net: the CNN on MNIST,
ResNet-18 on an image folder and a user's own LightningModule (the shapes example), each rebuilt
from its training run's config and scored by its own validation metrics."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir

from segperf.config import CONFIG_DIR
from segperf.inference import InferenceError
from segperf.inference.quality import Replay
from segperf.inference.run import infer
from segperf.training.run import train
from tests.conftest import MNIST_TINY, QUIET, REPO, compose_config
from tests.test_imagefolder import IMAGEFOLDER_TINY, make_folder

EXAMPLES = REPO / "examples"
# two training steps of 32 and one validation of two batches: enough to have weights to run
TWO_BATCHES = ["train_images=64", "val_images=64", "batch_size=32", "val_every_images=64"]
SHAPES = ["model=shapes_cnn", "data=shapes", "data.train_count=64", "data.val_count=32", "data.size=32"]
SHAPES += ["train_images=32", "val_images=32", "batch_size=16", "val_every_images=32", "perf.peak_probe=false"]


def infer_config(*overrides: str, search: str | None = None):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        extra = [f"hydra.searchpath=[file://{search}]"] if search else []
        return compose(config_name="infer", overrides=[*extra, *overrides])


def trained(run_dir, cfg):
    results = train(cfg, run_dir)
    assert results["status"] == "completed", results.get("error")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    return results


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory, tiny_mnist):
    run_dir = tmp_path_factory.mktemp("cnn_run")
    trained(run_dir, compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", *TWO_BATCHES))
    return run_dir


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """The example trained as `cd examples && python -m segperf.train --config-dir conf ...` does."""
    run_dir = tmp_path_factory.mktemp("shapes_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES))
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            search = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"
            cfg = compose(config_name="train", overrides=[search, *SHAPES, *QUIET])
        trained(run_dir, cfg)
    return run_dir


def test_the_cnn_run_is_rebuilt_and_scored_by_its_own_accuracy(cnn_run, tmp_path):
    results = infer(infer_config(f"run_dir={cnn_run}", "val_images=64", "batch_size=32"), tmp_path)
    assert results["status"] == "completed"
    assert results["config"]["model"]["_target_"] == "segperf.model.cnn.ClassificationModule"
    assert results["config"]["data"]["_target_"].endswith("MnistDataModule")
    assert results["inference"]["images"] == 64 and results["inference"]["end_to_end_images_per_s"] > 0
    quality = results["quality"]
    assert (quality["metric"], quality["mode"]) == ("val_accuracy", "max")
    # the same 64 test digits and weights training validated last: the same accuracy
    training = json.loads((cnn_run / "results.json").read_text())["quality"]
    assert quality["val_accuracy"] == pytest.approx(training["val_accuracy"], abs=1e-6)
    assert quality["val_loss"] == pytest.approx(training["val_loss"], rel=1e-4)
    assert quality["change_vs_fp32"] == 0.0 and quality["agreement_vs_fp32"] == 1.0
    assert "val_dice" not in quality and "dice_vs_fp32" not in quality
    assert json.loads((tmp_path / "results.json").read_text())["quality"] == quality


def test_reduced_precision_on_the_cnn_is_compared_with_its_fp32_self_per_image(cnn_run, tmp_path):
    results = infer(infer_config(f"run_dir={cnn_run}", "precision=bf16", "val_images=64", "batch_size=32"), tmp_path)
    assert results["status"] == "completed"
    quality = results["quality"]
    if "precision" in results["adjusted"]:  # this torch cannot run bf16 here: fp32, said
        assert results["inference"]["weights_dtype"] == "float32"
        return
    assert results["inference"]["weights_dtype"] == "bfloat16"
    # predicted digits (one per image) agree with the fp32 module's; the accuracy change is measured
    assert 0.9 <= quality["agreement_vs_fp32"] <= 1.0
    assert quality["change_vs_fp32"] == pytest.approx(quality["val_accuracy"] - quality["fp32_val_accuracy"])
    assert abs(quality["change_vs_fp32"]) <= 0.1


def test_resnet18_on_an_image_folder_infers_with_its_accuracy(tmp_path):
    root = make_folder(tmp_path / "photos", {"cat": 10, "dog": 10})
    run_dir = tmp_path / "run"
    size = ["train_images=16", "batch_size=8", "val_every_images=16"]
    trained(run_dir, compose_config(*IMAGEFOLDER_TINY, f"data.root={root}", *size))
    results = infer(infer_config(f"run_dir={run_dir}", "batch_size=2"), tmp_path / "infer")
    assert results["status"] == "completed"
    assert results["config"]["data"]["height"] == 64  # the run's size, not infer.yaml's
    assert results["inference"]["images"] == results["dataset"]["val_images"] == 4  # the folder's held-out 4
    quality = results["quality"]
    assert quality["metric"] == "val_accuracy" and 0.0 <= quality["val_accuracy"] <= 1.0
    assert quality["val_accuracy"] == pytest.approx(
        json.loads((run_dir / "results.json").read_text())["quality"]["val_accuracy"]
    )


def test_a_users_own_module_infers_from_its_runs_config_with_its_quality_metric(shapes_run, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # infer runs from the folder training ran in
    results = infer(infer_config(f"run_dir={shapes_run}", "val_images=32", "batch_size=16"), tmp_path)
    assert results["status"] == "completed", results.get("error")
    assert results["config"]["model"]["_target_"] == "shapes.model.ShapesCNN"
    assert results["dataset"]["val_images_used"] == 32 and results["inference"]["images"] == 32
    quality = results["quality"]
    training = json.loads((shapes_run / "results.json").read_text())["quality"]
    assert (quality["metric"], quality["mode"]) == ("val_acc", "max")  # model.quality of its config
    assert quality["val_acc"] == pytest.approx(training["val_acc"], abs=1e-6)
    assert quality["val_loss"] == pytest.approx(training["val_loss"], rel=1e-4)
    assert quality["agreement_vs_fp32"] == 1.0


def test_a_users_run_writes_its_tensorboard_event_files_in_its_run_folder(shapes_run):
    events = list(shapes_run.rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


def test_a_users_module_that_cannot_be_imported_says_where_to_run_infer(shapes_run, tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n == "shapes" or n.startswith("shapes.")]:
        monkeypatch.delitem(sys.modules, name)  # imported by an earlier test: as in a fresh process
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(EXAMPLES)])
    with pytest.raises(InferenceError, match=r"shapes\.model\.ShapesCNN .*: run segperf.infer from the folder"):
        infer(infer_config(f"run_dir={shapes_run}"), tmp_path)


def test_a_run_folder_without_a_checkpoint_says_why_and_what_to_give(cnn_run, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"status": "failed", "config": {}}))
    with pytest.raises(InferenceError, match=r"has no checkpoints/last.ckpt to run: the run's status is 'failed'"):
        infer(infer_config(f"run_dir={run_dir}"), tmp_path / "a")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "interrupted.ckpt").write_bytes((cnn_run / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(InferenceError, match=r"give ckpt=.*interrupted.ckpt run_dir="):
        infer(infer_config(f"run_dir={run_dir}"), tmp_path / "b")
    assert json.loads((tmp_path / "b" / "results.json").read_text())["status"] == "failed"


def test_a_bare_checkpoint_of_another_net_than_the_unet_asks_for_its_run_folder(cnn_run, tmp_path):
    with pytest.raises(InferenceError, match=r"another net than the U-Net .*give run_dir="):
        infer(infer_config(f"ckpt={cnn_run / 'checkpoints' / 'last.ckpt'}"), tmp_path)


def test_the_replay_hands_back_the_engines_outputs_and_notices_a_step_that_does_not_call_forward():
    own = torch.nn.Identity()
    outputs = [torch.ones(2, 3, dtype=torch.bfloat16), torch.zeros(1, 3)]
    replay = Replay(outputs, own)
    first = replay(torch.full((2, 3), 7.0))
    assert first.dtype == torch.float32 and torch.equal(first, torch.ones(2, 3))
    assert torch.equal(replay(torch.full((1, 3), 7.0)), torch.zeros(1, 3)) and replay.matched
    assert torch.equal(replay(torch.full((1, 3), 7.0)), torch.full((1, 3), 7.0))  # a third call: its own forward
    assert not replay.matched
    other = Replay(outputs, own)
    other(torch.full((5, 3), 7.0))  # another batch size than the engine's first batch
    assert not other.matched


def test_infer_prepares_a_users_data_before_setting_it_up_as_lightning_does(shapes_run, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from shapes.data import ShapesDataModule

    calls = []
    monkeypatch.setattr(ShapesDataModule, "prepare_data", lambda self: calls.append("prepare_data"), raising=False)
    original_setup = ShapesDataModule.setup
    monkeypatch.setattr(
        ShapesDataModule, "setup", lambda self, stage=None: (calls.append("setup"), original_setup(self, stage))
    )
    results = infer(infer_config(f"run_dir={shapes_run}", "val_images=16", "batch_size=16"), tmp_path)
    assert results["status"] == "completed", results.get("error")
    assert calls[:2] == ["prepare_data", "setup"]  # a data module that downloads or writes its cache in prepare_data


def test_a_quality_read_from_fewer_images_than_the_run_validated_on_says_so(shapes_run, tmp_path, monkeypatch):
    # infer's default val_images (16) read an outside model's val_mae as 3.40 where its run's 256 read 4.05
    monkeypatch.syspath_prepend(str(EXAMPLES))
    results = infer(infer_config(f"run_dir={shapes_run}", "val_images=16", "batch_size=16"), tmp_path / "a")
    assert results["status"] == "completed", results.get("error")
    [note] = [n for n in results["notices"] if n.startswith("quality from")]
    assert note.startswith("quality from 16 validation images") and "validated on 32: val_images=32" in note
    given = infer(infer_config(f"run_dir={shapes_run}", "val_images=16"), tmp_path / "b", keep={"val_images"})
    assert not [n for n in given["notices"] if n.startswith("quality from")]  # asked for: no word
