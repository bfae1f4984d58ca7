"""A user's own LightningModule and LightningDataModule under segperf's command line
(`--config-dir examples/conf model=shapes_cnn data=shapes`): the example trains, the speed axes
reach the user's loaders (or say why not), and every validation metric becomes the run's quality."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from segperf.command_line import workload_axis_problem
from segperf.config import CONFIG_DIR
from segperf.data.prefetch import ThreadPrefetchLoader
from segperf.report.settings import not_applied
from segperf.schema import problems_in
from segperf.training.loaders import LoaderSettings, rebuild
from segperf.training.quality import default_metric
from segperf.training.workload import Workload, build_workload, init_config
from tests.conftest import QUIET, REPO

EXAMPLES = REPO / "examples"
# the example at a few batches: 2 training steps of 16, a validation of 16 images
SMALL = [
    "model=shapes_cnn",
    "data=shapes",
    "train_images=32",
    "val_images=16",
    "batch_size=16",
    "val_every_images=32",
    "data.train_count=64",
    "data.val_count=32",
    "data.size=32",
    "perf.peak_probe=false",
    *QUIET,
]


@pytest.fixture
def example_cfg(monkeypatch):
    """The example's config composed as `--config-dir examples/conf` composes it; its package importable."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def make(*overrides: str):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            search = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"
            return compose(config_name="train", overrides=[search, *SMALL, *overrides])

    return make


def settings(**changes) -> LoaderSettings:
    base = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": True}
    return LoaderSettings(**(base | {"batch_size": 8} | changes))


def digits(n: int = 32) -> TensorDataset:
    return TensorDataset(torch.randn(n, 1, 8, 8), torch.arange(n) % 3)


def test_the_example_trains_two_batches_and_records_every_validation_metric(example_cfg, tmp_path):
    from segperf.training.run import train

    results = train(example_cfg("workers=off"), tmp_path)
    assert results["status"] == "completed", results.get("error")
    assert results["train"]["steps"] == 2 and results["train"]["images"] == 32
    quality = results["quality"]
    assert quality["metric"] == "val_acc" and quality["mode"] == "max"  # from the example's model yaml
    assert {"val_acc", "val_loss", "first_val_acc", "first_val_loss"} <= quality.keys()
    assert quality["val_history"][-1]["step"] == 2
    # the user's loader batched 32; the run's batch_size is segperf's
    assert results["loaders"]["train"]["changed"]["batch_size"] == {"from": 32, "to": 16}
    assert results["dataset"]["train_dataset_size"] == 64
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["quality"]["metric"] == "val_acc"
    assert "val_acc (max: the run's quality)" in (tmp_path / "summary.txt").read_text()
    assert not [n for n in results.get("notices", []) if n.startswith("quality:")]  # the yaml named it


def test_a_model_config_without_quality_is_judged_by_the_default_metric_and_told_so(example_cfg, tmp_path):
    from segperf.training.run import train

    results = train(example_cfg("workers=off", "~model.quality"), tmp_path)
    assert (results["quality"]["metric"], results["quality"]["mode"]) == ("val_acc", "max")
    [notice] = [n for n in results["notices"] if n.startswith("quality:")]
    assert "names no quality.metric, so the report and the tuner judge this run by val_acc (higher is better)" in notice


def test_segperf_keys_stay_out_of_the_users_constructors(example_cfg):
    cfg = example_cfg("workers=auto", "pin=on", "memory_format=channels_last")
    assert cfg.data.num_workers >= 1 and cfg.model.memory_format == "channels_last"
    assert "num_workers" not in init_config(cfg.data, ("num_workers", "pin_memory", "prefetch_factor"))
    workload = build_workload(cfg)  # the example's classes take none of segperf's keys: no TypeError
    assert workload.model_changes["memory_format"].startswith("channels_last")
    assert workload.module.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert workload.trainer_options["max_steps"] == 2 and workload.trainer_options["limit_val_batches"] == 1


def test_a_rebuilt_loader_keeps_the_users_dataset_sampler_and_collate_and_takes_the_axes():
    def collate(items):
        return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])

    theirs = DataLoader(digits(), batch_size=4, shuffle=True, drop_last=True, collate_fn=collate)
    result = rebuild(theirs, settings(num_workers=2, prefetch_factor=3, pin_memory=True), "train")
    ours = result.loader
    assert ours.dataset is theirs.dataset and ours.sampler is theirs.sampler and ours.collate_fn is collate
    assert ours.drop_last and ours.batch_size == 8 and ours.num_workers == 2 and ours.prefetch_factor == 3
    assert ours.pin_memory and ours.persistent_workers
    assert result.changed["num_workers"] == {"from": 0, "to": 2}
    assert result.changed["batch_size"] == {"from": 4, "to": 8}
    assert result.not_applied == {}
    # and the record names what it kept
    kept = result.record()["kept"]
    assert kept == {"dataset": "TensorDataset", "sampler": "RandomSampler", "collate_fn": collate.__qualname__}


def test_what_rebuilding_changed_is_what_the_loader_does_with_dataloaders_defaults_resolved():
    theirs = DataLoader(digits(), batch_size=8, num_workers=2)  # prefetch_factor None: 2 with workers
    result = rebuild(theirs, settings(num_workers=2, persistent_workers=False), "train")
    assert result.loader.prefetch_factor == 2
    assert result.changed == {}  # not "prefetch_factor: 2 -> None"
    result = rebuild(theirs, settings(num_workers=0, persistent_workers=False), "train")
    assert result.changed == {"num_workers": {"from": 2, "to": 0}, "prefetch_factor": {"from": 2, "to": None}}


def test_prefetch_without_workers_is_a_background_thread_as_for_segperfs_loaders():
    result = rebuild(DataLoader(digits(), batch_size=4), settings(prefetch_factor=2), "val")
    assert isinstance(result.loader, ThreadPrefetchLoader)
    assert len(list(result.loader)) == 4  # 32 samples in batches of 8
    assert result.changed["prefetch_factor"] == {"from": None, "to": 2}


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(12).float())


def test_workers_on_an_iterable_dataset_are_not_applied_with_the_reason_and_the_report_sees_it():
    result = rebuild(DataLoader(Stream(), batch_size=4), settings(num_workers=2), "train")
    assert result.loader.num_workers == 0
    assert sum(len(b) for b in result.loader) == 12  # no sample twice
    change = result.not_applied["data.num_workers"]
    assert change["requested"] == 2 and change["used"] == 0 and "IterableDataset" in change["reason"]
    workload = Workload(None, None, "")
    workload.loaders["train"] = result.record()
    results = {"adjusted": {}, "axes": {"workers": 2}}
    assert workload.record(results) == {"data.num_workers": change}
    assert not_applied(results)  # the report's "not applied" column reads it


def test_workers_segperf_passed_to_the_data_module_are_taken_back_for_an_iterable_dataset():
    # the data module takes num_workers: its loader arrives with segperf's 2 workers already
    arrived = DataLoader(Stream(), batch_size=4, num_workers=2)
    result = rebuild(arrived, settings(num_workers=2), "train", own_workers=0)
    assert result.loader.num_workers == 0
    assert sum(len(b) for b in result.loader) == 12  # each sample once, not once a worker
    assert result.not_applied["data.num_workers"]["used"] == 0
    # a map-style dataset keeps segperf's workers, and the record says what segperf changed
    mapped = rebuild(DataLoader(digits(), batch_size=8, num_workers=2), settings(num_workers=2), "val", own_workers=0)
    assert mapped.loader.num_workers == 2 and mapped.changed["num_workers"] == {"from": 0, "to": 2}


def test_a_loader_that_is_no_dataloader_is_kept_and_every_axis_recorded_as_not_applied():
    batches = [(torch.zeros(2, 1, 8, 8), torch.zeros(2))]
    result = rebuild(batches, settings(num_workers=2), "train")
    assert result.loader is batches
    assert set(result.not_applied) == {"data.num_workers", "data.prefetch_factor", "data.pin_memory", "batch_size"}
    assert "not a torch DataLoader" in result.not_applied["data.num_workers"]["reason"]


def test_a_workload_only_axis_is_refused_naming_the_axes_this_workload_has():
    argv = ["--config-dir", str(EXAMPLES / "conf"), "model=shapes_cnn", "data=shapes", "upsample=deconv"]
    problem = workload_axis_problem(argv, CONFIG_DIR, "train")
    assert problem.startswith("upsample=deconv: not an axis of this workload (model=shapes_cnn, data=shapes)")
    assert "workers, prefetch, pin, memory_format, compile, precision, threads, batch_size" in problem
    assert workload_axis_problem(["upsample=deconv"], CONFIG_DIR, "train") is None  # the U-Net has it


def test_a_quality_mode_other_than_max_or_min_is_refused_before_any_work(example_cfg):
    # `mode: minimum` was taken as max: a lower-is-better metric judged upside down by the tuner's guard
    assert problems_in(example_cfg("model.quality.mode=min", "model.quality.metric=val_loss")) == []
    assert problems_in(example_cfg("model.quality.mode=minimum")) == [
        "model.quality.mode='minimum': use max (higher is better: an accuracy, Dice) or min (lower is better: "
        "a loss, an error)"
    ]
    (problem,) = problems_in(example_cfg("+model.quality.direction=min"))
    assert problem.startswith("model.quality.direction: not a setting of model.quality, which takes metric and mode")


def test_the_quality_metric_defaults_to_an_accuracy_then_a_loss():
    assert default_metric(["val_loss", "val_acc"]) == ("val_acc", "max")
    assert default_metric(["val_loss", "val_f1"]) == ("val_loss", "min")


@pytest.mark.slow
def test_a_sweep_of_the_example_reports_and_compares(tmp_path):
    """`-m workers=off,auto +repeat=0,1` on the example, then the report and the CI gate on it."""
    env = {**__import__("os").environ, "PYTHONPATH": f"{REPO / 'src'}:{EXAMPLES}"}
    sweep = tmp_path / "sweep"
    args = [a for a in SMALL if not a.startswith(("train_images", "data.train_count"))]
    args += ["train_images=64", "data.train_count=128", f"hydra.sweep.dir={sweep}"]
    # job folders named by what varies (the constant run size would make names too long to write)
    constant = [a.split("=", 1)[0] for a in args if not a.startswith(("model=", "data="))]
    args.append(f"hydra.job.config.override_dirname.exclude_keys=[{','.join(constant)}]")
    # -m after the run's overrides, as a user appends a sweep to the command that trained once
    command = [sys.executable, "-m", "segperf.train", "--config-dir", "conf", *args]
    done = subprocess.run(
        [*command, "-m", "workers=off,auto", "+repeat=0,1"], cwd=EXAMPLES, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = sorted(sweep.glob("*/results.json"))
    assert len(runs) == 4 and all(json.loads(r.read_text())["status"] == "completed" for r in runs)
    report = subprocess.run(
        [sys.executable, "-m", "segperf.report", str(sweep)], env=env, capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr
    configs = json.loads((sweep / "report.json").read_text())["configurations"]
    assert len(configs) == 2
    gate = [sys.executable, "-m", "segperf.compare", str(sweep), str(sweep), "--out", str(tmp_path)]
    same = subprocess.run([*gate, "--ref-where", "workers=auto", "--cand-where", "workers=auto"], env=env)
    assert same.returncode == 0
    compared = json.loads((tmp_path / "compare.json").read_text())
    assert compared["ratio"] == pytest.approx(1.0) and len(compared["cand"]["runs"]) == 2


def test_the_summary_names_a_users_data_module_and_its_sizes_not_segperfs_own_counts():
    from segperf.perf.summary import format_run_summary

    results = {
        "status": "completed",
        "dataset": {"datamodule": "TextureDataModule", "train_dataset_size": 1024, "val_dataset_size": 256},
        "quality": {
            "metric": "val_acc",
            "mode": "max",
            "val_acc": 0.99,
            "val_history": [{"step": 32, "val_acc": 0.99}],
        },
    }
    lines = format_run_summary(results).splitlines()
    data = [line for line in lines if line.startswith("Data")]
    assert data == ["Data                    TextureDataModule (1,024 train, 256 val samples)"]
    assert not any("cars" in line or "datapoints" in line for line in lines)
    # a label longer than the column still has its value apart from it
    assert "val_acc (max: the run's quality) 0.9900" in lines


def test_a_quality_metric_named_as_logged_with_a_slash_is_read_under_its_results_key():
    from segperf.training.quality import quality_section

    history = [{"step": 8, "val_acc": 0.4, "val_loss": 1.2}, {"step": 16, "val_acc": 0.7, "val_loss": 0.9}]
    section = quality_section(history, {"metric": "val/acc", "mode": "max"})  # self.log("val/acc", ...)
    assert section["metric"] == "val_acc" and section["mode"] == "max"
    assert section[section["metric"]] == 0.7 and section["first_val_acc"] == 0.4


def test_channels_last_converts_the_images_of_any_batch_structure_and_keeps_it():
    from typing import NamedTuple

    from segperf.training.workload import to_channels_last

    class Batch(NamedTuple):
        x: torch.Tensor
        y: torch.Tensor

    image, label = torch.randn(2, 3, 8, 8), torch.tensor([0, 1])
    for batch in (Batch(image, label), (image, label), [image, label], {"x": image, "y": label}):
        converted = to_channels_last(batch)
        assert type(converted) is type(batch)
        x, y = (converted["x"], converted["y"]) if isinstance(converted, dict) else converted
        assert x.is_contiguous(memory_format=torch.channels_last) and torch.equal(x, image) and y is label


class TakesWorkers:
    def __init__(self, batch_size: int, num_workers: int = 3) -> None:
        self.batch_size, self.num_workers = batch_size, num_workers


def test_what_a_data_module_would_give_its_loaders_without_segperfs_num_workers():
    from omegaconf import OmegaConf

    from segperf.training.workload import constructor_default

    takes = OmegaConf.create({"_target_": f"{__name__}.TakesWorkers", "batch_size": 8, "num_workers": 2})
    assert constructor_default(takes, "num_workers") == 3  # its own default, not segperf's 2
    example = OmegaConf.create({"_target_": "torch.utils.data.TensorDataset", "num_workers": 2})
    assert constructor_default(example, "num_workers") is None  # takes no num_workers: segperf passes none
