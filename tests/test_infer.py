"""The inference benchmark on a tiny trained checkpoint: counts and rates, what reduced weight
precision does to the predictions, safe loading, ONNX Runtime, and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import segperf.inference.run as infer_module
from segperf.config import CONFIG_DIR
from segperf.inference import InferenceError, benchmark, load_net
from segperf.inference.run import infer
from segperf.inference.runtimes import OnnxRuntime, TorchRuntime
from segperf.model.unet import UNet
from segperf.training.run import train
from tests.conftest import TINY, compose_config
from tests.extras import needs_extra

# reduced-precision weights must keep this share of fp32's pixel predictions
MIN_AGREEMENT = 0.98
# ... and their car masks must stay this close to fp32's: Dice between the two, and the change
# of Dice against the true masks
MIN_DICE_VS_FP32, MAX_DICE_CHANGE = 0.97, 0.02
# the trained checkpoint's val Dice: it has learned to find the cars
LEARNED_DICE = 0.8
SMALL = ["val_images=2", "batch_size=2", "warmup_batches=0"]
# bf16/fp16 run emulated (~10x slower than fp32) on CPUs without native support: a quarter of the pixels
QUARTER_SIZE = ["data.height=32", "data.width=48"]


def infer_config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="infer", overrides=list(overrides))


def run(out_dir, *overrides: str, keep=frozenset()):
    # a val_images given is on the command line, as segperf.infer's own keep would say
    given = {"val_images"} if any(o.startswith("val_images=") for o in overrides) else set()
    return infer(infer_config(*overrides), out_dir, keep=set(keep) | given)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_carvana):
    """A training run dir with checkpoints/last.ckpt (64x96 images) of a model that has learned:
    the default recipe (BatchNorm, one-cycle lr) on a narrow U-Net, 80 steps of 4 (a few seconds
    on one thread). Its predictions have cars in them, so what reduced precision does to them is
    a real measurement (two models that predict no car at all agree perfectly)."""
    run_dir = tmp_path_factory.mktemp("train_run")
    narrow = ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]  # same U-Net, 1/16 the FLOPs
    run_size = ["train_images=320", "batch_size=4", "val_every_images=320", "num_threads=1"]
    cfg = compose_config(*TINY, f"data.root={tiny_carvana}", *narrow, *run_size)
    results = train(cfg, run_dir)
    assert results["status"] == "completed"
    assert results["quality"]["val_dice"] > LEARNED_DICE, results["quality"]
    return run_dir


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, tiny_carvana):
    """A training run dir with checkpoints/last.ckpt of two steps of the same narrow U-Net (the
    default recipe, BatchNorm included): for what inference does with any checkpoint, where
    what the model learned does not matter (tiny_run's 80 steps cost ~6 s)."""
    run_dir = tmp_path_factory.mktemp("short_run")
    narrow = ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]
    run_size = ["train_images=8", "batch_size=4", "val_every_images=8", "num_threads=1"]
    results = train(compose_config(*TINY, f"data.root={tiny_carvana}", *narrow, *run_size), run_dir)
    assert results["status"] == "completed"
    return run_dir


class Payload:
    """Pickles as a call to os.mkdir: loading it unsafely would create `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_infer_writes_counts_rates_and_the_training_runs_quality(short_run, tmp_path):
    returned = run(tmp_path, f"run_dir={short_run}", "val_images=4", "warmup_batches=1")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results == json.loads(json.dumps(returned))
    assert (results["kind"], results["status"]) == ("inference", "completed")
    inference = results["inference"]
    assert inference["images"] == 4 == results["dataset"]["val_images_used"]
    assert inference["end_to_end_images_per_s"] > 0 and inference["model_images_per_s"] > 0
    assert (inference["weights_dtype"], inference["device"], inference["warmup_batches"]) == ("float32", "cpu", 1)
    assert inference["load_s"] > 0 and inference["checkpoint"].endswith("last.ckpt")
    # the run's image size and data, not infer.yaml's 256x384 defaults
    assert (results["config"]["data"]["height"], results["config"]["data"]["width"]) == (64, 96)
    assert results["axes"] == {
        "workers": 0,
        "prefetch": None,
        "pin": False,
        "memory_format": "nchw",
        "compile": False,
        "precision": "32-true",
        "runtime": "torch",
        "batch_size": 4,
    }
    # the same 4 validation images training scored at its end, so the same accuracy
    trained = json.loads((short_run / "results.json").read_text())["quality"]
    quality = results["quality"]
    assert quality["val_pixel_accuracy"] == pytest.approx(trained["val_pixel_accuracy"], abs=1e-4)
    assert quality["val_dice"] == pytest.approx(trained["val_dice"], abs=1e-4)
    assert (quality["agreement_vs_fp32"], quality["dice_vs_fp32"]) == (1.0, 1.0)
    assert quality["dice_change_vs_fp32"] == 0.0 and quality["fp32_val_dice"] == quality["val_dice"]
    assert results["notices"] == [] and results["adjusted"] == {}


@pytest.mark.slow  # needs tiny_run's learned model (~6 s of training)
@pytest.mark.parametrize("precision, dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_reduced_weight_precision_keeps_the_learned_models_car_masks(tiny_run, tmp_path, precision, dtype):
    # 4 images at the training size: a model trained at 64x96 is judged at 64x96
    four = ["val_images=4", "warmup_batches=0"]
    fp32 = run(tmp_path / "fp32", f"run_dir={tiny_run}", "precision=fp32", *four)
    assert fp32["quality"]["val_dice"] > LEARNED_DICE - 0.1  # it finds the cars on these images
    results = run(tmp_path / precision, f"run_dir={tiny_run}", f"precision={precision}", *four)
    assert results["status"] == "completed" and results["inference"]["images"] == 4
    if "precision" in results["adjusted"]:  # this CPU's torch cannot run the dtype: said, not silent
        assert results["inference"]["weights_dtype"] == "float32"
        assert any("fp32" in notice for notice in results["notices"])
        return
    assert results["inference"]["weights_dtype"] == dtype
    quality = results["quality"]
    assert quality["agreement_vs_fp32"] >= MIN_AGREEMENT
    assert quality["dice_vs_fp32"] >= MIN_DICE_VS_FP32
    # the Dice change it reports is the one measured side by side with the fp32 run
    assert quality["fp32_val_dice"] == pytest.approx(fp32["quality"]["val_dice"], abs=1e-6)
    assert quality["dice_change_vs_fp32"] == pytest.approx(quality["val_dice"] - fp32["quality"]["val_dice"], abs=1e-6)
    assert abs(quality["dice_change_vs_fp32"]) <= MAX_DICE_CHANGE


def test_the_checkpoint_rebuilds_the_trained_norm_and_a_seed_era_one_loads_as_the_plain_net(short_run, tmp_path):
    net = load_net(short_run / "checkpoints" / "last.ckpt")
    assert net.config["norm"] == "batch"
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    plain = UNet(stem_channels=4, level_channels=[4, 8])
    config = {k: v for k, v in plain.config.items() if k != "norm"}  # saved before the norm option existed
    state = {f"net.{k}": v for k, v in plain.state_dict().items()}
    torch.save({"net_config": config, "state_dict": state}, tmp_path / "old.ckpt")
    old = load_net(tmp_path / "old.ckpt")
    assert old.config["norm"] == "none" and not any(isinstance(m, torch.nn.BatchNorm2d) for m in old.modules())
    x = torch.rand(1, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(old(x), plain.eval()(x))


def test_a_dtype_the_device_cannot_run_falls_back_to_fp32_with_a_notice(short_run, tmp_path, monkeypatch):
    monkeypatch.setattr(infer_module, "probe_dtype", lambda *args: "no float16 conv kernel")
    results = run(tmp_path, f"run_dir={short_run}", "precision=fp16", *SMALL)
    assert results["adjusted"]["precision"] == {
        "requested": "16-mixed",
        "used": "32-true",
        "reason": "no float16 conv kernel",
    }
    assert results["inference"]["weights_dtype"] == "float32"
    assert len(results["notices"]) == 1 and "fp32" in results["notices"][0]
    assert results["axes"]["precision"] == "16-mixed"  # what was asked; `adjusted` says what ran


def test_dice_is_averaged_over_images_and_skips_images_without_a_car():
    pred = [torch.tensor([[[1, 1, 0, 0]], [[0, 0, 0, 0]], [[1, 0, 0, 0]]])]
    true = [torch.tensor([[[1, 0, 0, 0]], [[0, 0, 0, 0]], [[0, 1, 0, 0]]])]
    assert benchmark.dice(pred, true, num_classes=2) == pytest.approx((2 / 3 + 0.0) / 2)
    assert benchmark.dice(true, true, num_classes=2) == 1.0
    assert benchmark.pixel_agreement(pred, true) == pytest.approx(9 / 12)
    nothing = [torch.zeros(2, 1, 4, dtype=torch.long)]
    assert benchmark.dice(nothing, nothing, num_classes=2) == 1.0  # both say "no car"


def test_a_checkpoint_with_a_pickled_object_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "code_ran"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "net_config": {}, "payload": Payload(marker)}, path)
    with pytest.raises(InferenceError, match="only load by running code from the file") as error:
        load_net(path)
    said = str(error.value)
    # one line naming the file and the object, and the way forward; not torch's cut-off options
    assert str(path) in said and "mkdir" in said and "run_dir=" in said
    assert "\n" not in said and "Weights only load failed" not in said
    assert not marker.exists()

    out = tmp_path / "out"
    with pytest.raises(InferenceError, match="refusing to load"):
        run(out, f"ckpt={path}")
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "failed" and str(path) in results["error"]


def test_missing_and_foreign_checkpoints_are_named_in_the_error(tmp_path):
    missing = tmp_path / "nowhere" / "last.ckpt"
    with pytest.raises(InferenceError, match="checkpoint not found") as error:
        run(tmp_path / "a", f"ckpt={missing}")
    assert str(missing) in str(error.value)
    assert json.loads((tmp_path / "a" / "results.json").read_text())["status"] == "failed"

    foreign = tmp_path / "weights.pt"
    torch.save({"conv.weight": torch.zeros(1)}, foreign)
    with pytest.raises(InferenceError, match="not a segperf checkpoint") as error:
        load_net(foreign)
    assert str(foreign) in str(error.value)
    with pytest.raises(InferenceError, match="ckpt=.*run_dir="):
        run(tmp_path / "b")


class CountingRuntime(TorchRuntime):
    """A runtime from outside segperf, named by its `_target_`: torch's runner, counting forwards."""

    forwards = 0

    def build(self, job):
        built = super().build(job)
        forward = built.runner.forward

        def counted(x):
            CountingRuntime.forwards += 1
            return forward(x)

        built.runner.forward = counted
        return built


def test_runtimes_are_built_from_their_config_with_its_options():
    torch_runtime = instantiate(infer_config("runtime=torch").runtime)
    assert type(torch_runtime) is TorchRuntime and torch_runtime.name == "torch"
    providers = "runtime.providers=[CPUExecutionProvider]"
    onnx = instantiate(infer_config("runtime=onnxruntime", "runtime.min_agreement=0.5", providers).runtime)
    assert type(onnx) is OnnxRuntime and onnx.name == "onnxruntime"
    assert (onnx.min_agreement, onnx.providers) == (0.5, ["CPUExecutionProvider"])


def test_only_the_torch_runtime_warns_that_reduced_precision_is_emulated_on_this_cpu(monkeypatch):
    import segperf.training.trainer as trainer

    monkeypatch.setattr(trainer, "cpu_flags", lambda: {"avx2"})  # no bf16 instructions
    cpu = torch.device("cpu")
    assert "torch emulates it" in TorchRuntime().dtype_notice("bf16-mixed", cpu)
    assert TorchRuntime().dtype_notice("32-true", cpu) is None
    assert OnnxRuntime().dtype_notice("bf16-mixed", cpu) is None  # its own kernels, or a fallback to fp32


def test_any_runtime_class_named_by_target_is_what_runs(short_run, tmp_path):
    CountingRuntime.forwards = 0
    target = f"runtime._target_={__name__}.CountingRuntime"
    results = run(tmp_path, f"run_dir={short_run}", target, "runtime.name=counting", *SMALL)
    assert results["status"] == "completed" and results["axes"]["runtime"] == "counting"
    assert CountingRuntime.forwards == 2  # one batch of 2 images, end-to-end and model-only
    assert results["quality"]["agreement_vs_fp32"] == 1.0


def test_a_runtime_config_without_a_target_is_refused_in_one_line(short_run, tmp_path):
    with pytest.raises(InferenceError, match="runtime='torch': use runtime=torch or runtime=onnxruntime"):
        run(tmp_path, f"run_dir={short_run}", "~runtime._target_", *SMALL)
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_onnxruntime_exports_the_model_and_agrees_with_torch(tiny_run, tmp_path):
    needs_extra("onnx")
    settings = ["memory_format=channels_last", "compile=on"]  # neither applies to onnxruntime: said, recorded
    results = run(tmp_path, f"run_dir={tiny_run}", "runtime=onnxruntime", *settings, *SMALL)
    assert results["status"] == "completed" and results["axes"]["runtime"] == "onnxruntime"
    assert {k: (v["requested"], v["used"]) for k, v in results["adjusted"].items()} == {
        "compile": (True, False),
        "memory_format": ("channels_last", "nchw"),
    }
    assert all(v.keys() == {"requested", "used", "reason"} and v["reason"] for v in results["adjusted"].values())
    assert results["notices"] == [
        "model.compile does not apply to onnxruntime (NCHW, own graph)",
        "model.memory_format does not apply to onnxruntime (NCHW, own graph)",
    ]
    assert (tmp_path / "model.onnx").is_file() and results["onnx"]["path"] == str(tmp_path / "model.onnx")
    assert results["onnx"]["agreement"] >= 0.99 and results["onnx"]["max_abs_diff"] < 1e-3
    assert "CPUExecutionProvider" in results["onnx"]["providers"]
    assert results["quality"]["agreement_vs_fp32"] >= 0.99
    assert results["inference"]["images"] == 2 and results["inference"]["model_images_per_s"] > 0


def test_onnxruntime_missing_says_how_to_install_it(short_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    with pytest.raises(InferenceError, match=r"pip install -e \.\[onnx\]"):
        run(tmp_path, f"run_dir={short_run}", "runtime=onnxruntime", *SMALL)


def cli(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    command = [sys.executable, "-m", "segperf.infer", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_infer_command_and_a_precision_sweep(tiny_run, tmp_path):
    done = cli([f"run_dir={tiny_run}", "hydra.run.dir=one", "val_images=4", "warmup_batches=1"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "one" / "results.json").read_text())
    assert results["status"] == "completed" and results["inference"]["images"] == 4
    assert "end-to-end" in done.stdout and "model-only" in done.stdout

    sweep = ["-m", f"run_dir={tiny_run}", "precision=fp32,bf16", "hydra.sweep.dir=sweep", *SMALL, *QUARTER_SIZE]
    done = cli(sweep, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted((tmp_path / "sweep").glob("*/results.json"))
    assert len(runs) == 2
    jobs = [json.loads(p.read_text()) for p in runs]
    assert [j["axes"]["precision"] for j in jobs] == ["32-true", "bf16-mixed"]
    # the command line's size wins over the training run's 64x96
    assert all((j["config"]["data"]["height"], j["status"]) == (32, "completed") for j in jobs)

    done = cli(["ckpt=missing.ckpt", "hydra.run.dir=bad"], tmp_path)
    assert done.returncode != 0
    expected = f"segperf.infer: error: checkpoint not found: {tmp_path / 'missing.ckpt'}"
    assert done.stderr.strip().splitlines()[-1] == expected
