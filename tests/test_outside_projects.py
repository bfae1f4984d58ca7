"""Real Lightning projects' configs under segperf's command line, taken as they are and never taken
for segperf's own: a lightning-hydra-template project (tests/fixtures/hydra_template: its
MNISTLitModule with `net: {_target_: ...}`, `_partial_` optimizer and scheduler and `compile: bool`,
its MNISTDataModule), and a module that brings its own train_dataloader() and no validation, under
`data=none` (tests/fixtures/own_loaders, Lightning's demo LightningTransformer on generated tokens).
Whose workload it is comes from the classes the configs name (segperf.training.workload)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from segperf.command_line import workload_choice_problem
from segperf.config import CONFIG_DIR
from segperf.errors import SettingsError
from segperf.training.workload import build_workload, init_config, is_users_model, takes
from tests.conftest import QUIET, REPO

FIXTURES = REPO / "tests" / "fixtures"
TEMPLATE = FIXTURES / "hydra_template"  # configs/ and its package `src`, as the template lays them out
OWN_LOADERS = FIXTURES / "own_loaders"  # conf/ and its package `lm`
# a few batches: 2 training steps of 16 (the template's own batch is 128), a validation of 16
TEMPLATE_RUN = ["model=mnist", "data=digits", "train_images=32", "val_images=16", "batch_size=16"]
TEMPLATE_RUN += ["val_every_images=32", "perf.peak_probe=false"]
LM_RUN = ["model=transformer", "data=none", "train_images=32", "val_images=8", "batch_size=8"]
LM_RUN += ["val_every_images=32", "perf.peak_probe=false"]


def forget_package(name: str) -> None:
    """The template's package is called `src`: no other test's `src` (nor this one's) stays imported."""
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


@pytest.fixture
def outside_cfg(monkeypatch):
    """A project's config composed as `--config-dir <its folder>` composes it (after segperf's own
    conf/ on the search path), its package importable as from the project's folder."""

    def make(project: Path, config_dir: str, package: str, *overrides: str):
        forget_package(package)
        monkeypatch.syspath_prepend(str(project))
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            search = f"hydra.searchpath=[file://{project / config_dir}]"
            return compose(config_name="train", overrides=[search, *overrides, *QUIET])

    yield make
    forget_package("src")
    forget_package("lm")


def template_cfg(outside_cfg, *overrides: str):
    return outside_cfg(TEMPLATE, "configs", "src", *TEMPLATE_RUN, *overrides)


def test_a_lightning_hydra_template_project_trains_and_records_its_quality_and_rebuilt_loaders(outside_cfg, tmp_path):
    from segperf.training.run import train

    results = train(template_cfg(outside_cfg, "data.num_workers=1"), tmp_path)
    assert results["status"] == "completed", results.get("error")
    assert results["train"]["steps"] == 2 and results["train"]["images"] == 32  # the run size, not 55,000
    quality = results["quality"]
    # `val/acc`, `val/loss`, `val/acc_best` as logged, under results.json's keys; judged by val_acc
    assert {"val_acc", "val_loss", "val_acc_best"} <= quality.keys() and quality["metric"] == "val_acc"
    train_loader = results["loaders"]["train"]
    # the data module took segperf's num_workers (its own argument), and the loader came back rebuilt
    assert train_loader["changed"]["num_workers"] == {"from": 0, "to": 1}
    assert train_loader["changed"]["batch_size"] == {"from": 128, "to": 16}
    assert train_loader["kept"]["dataset"] == "Subset" and train_loader["dataset_size"] == 55_000
    written = json.loads((tmp_path / "results.json").read_text())
    assert (
        written["quality"]["metric"] == "val_acc" and written["loaders"]["train"]["changed"]["num_workers"]["to"] == 1
    )


def test_segperfs_keys_reach_the_templates_constructors_only_where_they_mean_the_same(outside_cfg):
    cfg = template_cfg(outside_cfg, "compile=on", "prefetch=on", "memory_format=channels_last")
    workload = build_workload(cfg)
    module, datamodule = workload.module, workload.datamodule
    # model.compile is the template's own `compile: bool`: given to it, and it compiles its net in setup("fit")
    assert module.hparams.compile is True and module._compiled_call_impl is None  # segperf compiled nothing itself
    assert workload.model_changes["compile"] == "true: given to MNISTLitModule(compile=True), which compiles as it does"
    # it takes no memory_format: segperf applies channels-last itself
    assert workload.model_changes["memory_format"].startswith("channels_last: weights")
    # the data module takes num_workers and pin_memory, not prefetch_factor (the reported TypeError)
    assert datamodule.hparams.num_workers == 0 and "prefetch_factor" not in datamodule.hparams
    assert "quality" not in module.hparams  # no constructor argument of that name
    assert workload.trainer_options["max_steps"] == 2 and workload.trainer_options["limit_val_batches"] == 1


def test_whose_workload_comes_from_the_class_a_config_names_never_from_its_keys(outside_cfg):
    template = template_cfg(outside_cfg)
    assert "_target_" in template.model.net  # the shape segperf's own model configs have too
    assert is_users_model(template.model)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        ours = compose(config_name="train", overrides=["model=cnn", "data=mnist", "size=mnist_demo", *QUIET])
    assert not is_users_model(ours.model)


def test_segperfs_own_workload_takes_the_same_path_and_builds_its_own_loaders():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=["model=cnn", "data=mnist", "size=mnist_demo", "compile=on", "workers=auto", *QUIET],
        )
    workload = build_workload(cfg)
    # its module takes compile and memory_format as segperf means them, as the template's takes compile
    assert workload.model_changes == {
        "compile": "true: given to ClassificationModule(compile=True), which compiles as it does"
    }
    # a segperf RunDataModule builds its loaders with the axes and draws the run itself: nothing rebuilt
    assert workload.trainer_options == {} and workload.datamodule.num_workers == cfg.data.num_workers
    assert workload.description == workload.module.net.describe(28, 28)  # the net describes the run, as ever


class Compiles:
    def __init__(self, compile: bool = False) -> None: ...


class CompileMode:
    def __init__(
        self, compile: str = "default", memory_format: torch.memory_format = torch.contiguous_format
    ) -> None: ...


class NeedsCompileMode:
    def __init__(self, compile: str) -> None: ...


class Loads:
    def __init__(self, num_workers: int = 0, prefetch_factor: int = 2) -> None: ...


class Untyped:
    def __init__(self, num_workers=0, prefetch_factor=2, compile=False) -> None: ...


def node(cls: type, **keys):
    return OmegaConf.create({"_target_": f"{__name__}.{cls.__qualname__}", **keys})


def test_a_constructor_argument_of_the_same_name_but_another_meaning_gets_no_segperf_value():
    assert takes(node(Compiles), "compile", True)
    assert not takes(node(CompileMode), "compile", True)  # a mode string, not segperf's switch
    assert not takes(node(CompileMode), "memory_format", "channels_last")  # a torch.memory_format
    assert takes(node(Untyped), "num_workers", 2) and takes(node(Untyped), "compile", True)
    assert takes(node(Untyped), "prefetch_factor", None)  # unannotated: None is anyone's "the default"
    assert takes(node(Loads), "num_workers", 2) and not takes(node(Loads), "prefetch_factor", None)
    assert not takes(node(Loads), "pin_memory", True)  # no such argument
    # not passed: the class's default holds
    assert dict(init_config(node(CompileMode, compile=True), ("compile",))) == {"_target_": node(CompileMode)._target_}
    # not passed and no default: one line naming it, not a TypeError from the constructor
    with pytest.raises(SettingsError, match="compile: .*NeedsCompileMode takes `compile` as str, which segperf's"):
        init_config(node(NeedsCompileMode, compile=True), ("compile",))


def test_a_module_with_its_own_loaders_trains_under_data_none_without_validation(outside_cfg, tmp_path):
    from segperf.training.run import train

    results = train(outside_cfg(OWN_LOADERS, "conf", "lm", *LM_RUN), tmp_path)
    assert results["status"] == "completed", results.get("error")
    # the run size limits the module's own loader (255 blocks of tokens): 4 steps of 8
    assert results["train"]["steps"] == 4 and results["train"]["images"] == 32
    assert results["loaders"]["train"]["changed"] == {"batch_size": {"from": 1, "to": 8}}
    assert "val" not in results["loaders"] and results["quality"] == {}
    assert results["dataset"] == {"datamodule": "LightningTransformer's own loaders", "train_dataset_size": 255}
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "completed"
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()  # no validation: written at the end
    summary = (tmp_path / "summary.txt").read_text().lower()  # a language model's: samples, no images or Dice
    assert "samples/s" in summary
    # the run size's key names are typed as they are (a verdict may say "a larger val_every_images")
    prose = re.sub(r"\b(train|val|val_every)_images\b", "", summary)
    assert not any(word in prose for word in ("image", "dice", "pixel accuracy")), summary


def test_data_none_for_a_module_without_loaders_of_its_own_is_refused_before_any_work():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["model=cnn", "data=none", "size=mnist_demo", *QUIET])
    with pytest.raises(SettingsError, match=r"data=none: ClassificationModule has no train_dataloader\(\) of its own"):
        build_workload(cfg)


def test_an_option_name_both_folders_have_or_a_model_without_data_is_refused_on_the_command_line(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mnist.yaml").write_text((TEMPLATE / "configs" / "data" / "digits.yaml").read_text())
    clash = workload_choice_problem(["--config-dir", str(tmp_path), "model=cnn", "data=mnist"], CONFIG_DIR)
    assert clash.startswith(f"data=mnist: both your {tmp_path / 'data' / 'mnist.yaml'} and segperf's own data=mnist")
    assert "give yours another name (data/my_mnist.yaml) and choose it with data=my_mnist" in clash
    own = ["--config-dir", str(OWN_LOADERS / "conf"), "model=transformer"]
    missing = workload_choice_problem(own, CONFIG_DIR)
    assert missing.startswith("model=transformer is yours") and "or data=none to train on the module's own" in missing
    assert workload_choice_problem([*own, "data=none"], CONFIG_DIR) is None
    assert workload_choice_problem(["model=cnn", "data=mnist"], CONFIG_DIR) is None  # segperf's own, no folder


def test_the_tuner_refuses_a_model_without_data_as_training_does(capsys):
    from segperf.tune.cli import main

    assert main(["--config-dir", str(OWN_LOADERS / "conf"), "model=transformer"]) == 2
    assert "segperf.tune: error: model=transformer is yours" in capsys.readouterr().err


def run_from(folder: Path, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "segperf.train", *args, *QUIET, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_readmes_template_command_trains_from_the_projects_folder(tmp_path):
    """README.md: `python -m segperf.train --config-dir configs model=mnist data=digits` (+ a run size)."""
    done = run_from(TEMPLATE, ["--config-dir", "configs", *TEMPLATE_RUN, "workers=auto"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["quality"]["metric"] == "val_acc"
    assert results["loaders"]["train"]["changed"]["num_workers"]["to"] == results["config"]["data"]["num_workers"]


@pytest.mark.slow
def test_the_readmes_data_none_command_trains_on_the_modules_own_loader(tmp_path):
    """README.md: `python -m segperf.train --config-dir conf model=transformer data=none` (+ a run size),
    and the same without data=, refused with the way out."""
    done = run_from(OWN_LOADERS, ["--config-dir", "conf", *LM_RUN], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "completed"
    without = run_from(OWN_LOADERS, ["--config-dir", "conf", "model=transformer"], tmp_path)
    assert without.returncode == 2 and "data=none to train on the module's own train_dataloader()" in without.stderr
