"""segperf installed as a user installs it: the wheel in a fresh environment, run from a folder outside
any checkout (tests/wheel_env.py). Every command finds its configs inside the package and sets up its
own environment (the tool caches under $SEGPERF_CACHE), as no import of segperf does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import NARROW_UNET, QUIET, REPO
from tests.wheel_env import Installed, install_wheel

pytestmark = pytest.mark.slow

# the default workload (the U-Net on built-in Carvana-layout data), tiny: 3 cars of 240x160 photos,
# a 64x96 model input, 2 steps of 4; augment=basic imports albumentations, which must stay offline
CARVANA_RUN = [
    "perf.peak_probe=false",
    "data.height=64",
    "data.width=96",
    "data.synthetic.cars=3",
    "data.synthetic.width=240",
    "data.synthetic.height=160",
    "train_images=8",
    "val_images=4",
    "batch_size=4",
    "val_every_images=8",
    "augment=basic",
    *NARROW_UNET,
    *QUIET,
]
# the CPU study's workload on 128 built-in digits: a run is a fraction of a second of training
MNIST_RUN = ["perf.peak_probe=false", "model=cnn", "data=mnist", "data.builtin.train=128", "data.builtin.test=32"]
MNIST_RUN += ["train_images=64", "val_images=32", "val_every_images=64", *QUIET]
EXAMPLE_RUN = ["model=shapes_cnn", "data=shapes", "train_images=32", "val_images=16", "batch_size=16"]
EXAMPLE_RUN += ["val_every_images=32", "perf.peak_probe=false", *QUIET]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    return install_wheel(tmp_path_factory.mktemp("wheel"))


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_the_wheel_holds_the_configs_and_segperf_comes_from_it(installed):
    shown = installed.run("-c", "import segperf.config as c; print(c.__file__); print(c.CONFIG_DIR)")
    assert shown.returncode == 0, shown.stderr
    module, config_dir = (Path(line) for line in shown.stdout.split())
    env = (installed.root / "env").resolve()
    assert module.resolve().is_relative_to(env) and config_dir.is_relative_to(env)
    assert (config_dir / "train.yaml").is_file() and (config_dir / "model" / "unet.yaml").is_file()


def test_the_installed_train_command_trains_on_built_in_data_and_keeps_its_caches_in_segperfs(installed):
    done = installed.run("-m", "segperf.train", *CARVANA_RUN, "hydra.run.dir=runs/carvana")
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(installed.work / "runs" / "carvana")["status"] == "completed"
    # the command routed the tool caches itself: none was set in its environment
    assert (installed.cache / "matplotlib").is_dir() and (installed.cache / "torchinductor").is_dir()


def test_the_installed_train_command_trains_a_users_model_from_their_config_dir(installed):
    project = installed.work / "project"
    shutil.copytree(REPO / "examples", project, ignore=shutil.ignore_patterns("__pycache__"))
    done = installed.run("-m", "segperf.train", "--config-dir", "conf", *EXAMPLE_RUN, "hydra.run.dir=run", cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    record = results(project / "run")
    assert record["status"] == "completed" and record["quality"]["metric"] == "val_acc"


def test_the_installed_report_and_compare_read_a_sweep(installed):
    sweep = installed.work / "sweep"
    grid = ["-m", "+repeat=0,1", "batch_size=16,32", f"hydra.sweep.dir={sweep}"]
    done = installed.run("-m", "segperf.train", *MNIST_RUN, *grid, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(sweep.glob("*/results.json"))) == 4

    report = installed.run("-m", "segperf.report", str(sweep))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "batch_size" in (sweep / "report.md").read_text()

    # the CI gate of docs/COMPARE.md between the sweep's two batch sizes, with room for this
    # machine's noise: only a candidate at a tenth of the reference's speed would fail
    sides = ["--ref-where", "batch_size=16", "--cand-where", "batch_size=32", "--max-slowdown", "0.9"]
    compared = installed.run("-m", "segperf.compare", str(sweep), str(sweep), *sides, "--out", str(installed.work))
    assert compared.returncode == 0, compared.stdout + compared.stderr
    record = json.loads((installed.work / "compare.json").read_text())
    assert record["exit_status"] == 0 and len(record["ref"]["runs"]) == len(record["cand"]["runs"]) == 2
