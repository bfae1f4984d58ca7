"""A Lightning project of lightning-hydra-template, the most used Hydra template, with segperf's
`PerfMonitor` added to its callbacks config: its own test suite, run unchanged with segperf installed
from the wheel in a fresh environment (tests/wheel_env.py), from a folder outside this checkout,
passes, and each training run it makes leaves its results.json.

The project is tests/fixtures/lightning_hydra_template (the template's files, what differs said in
its README). The template's requirements that segperf's environment lacks are installed into the
fresh environment from the package index (its tests import rootutils, rich, hydra-colorlog and sh,
and pkg_resources); torch, Lightning and Hydra are the .venv's. A user adds PerfMonitor as this test
does: one entry in configs/callbacks/default.yaml."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.wheel_env import install_wheel

pytestmark = pytest.mark.slow

TEMPLATE = REPO / "tests" / "fixtures" / "lightning_hydra_template"
# the template's requirements.txt, less what segperf's environment has: versions tested here, and a
# setuptools that still has pkg_resources (its tests/helpers import it; Python 3.12's venv has none)
TEMPLATE_NEEDS = ["rootutils==1.0.7", "rich>=13", "hydra-colorlog==1.2.0", "sh>=2", "setuptools<81"]
# a part of the template's suite that takes about two minutes on two cores: its config and data
# module tests, a fast_dev_run, training under ddp_spawn on two CPU processes, a resumed run,
# train then its eval.py on the checkpoint, and a Hydra multirun of two jobs (subprocesses)
SUITE = [
    "tests/test_configs.py",
    "tests/test_datamodules.py",
    "tests/test_train.py::test_train_fast_dev_run",
    "tests/test_train.py::test_train_ddp_sim",
    "tests/test_train.py::test_train_resume",
    "tests/test_eval.py::test_train_eval",
    "tests/test_sweeps.py::test_hydra_sweep",
]
TESTS = 9  # the files' tests counted: test_datamodules.py's one is run for two batch sizes
# the training runs those tests make, each in its own folder under pytest's --basetemp
RUNS = ["test_train_fast_dev_run0", "test_train_ddp_sim0", "test_train_resume0", "test_train_eval0"]
RUNS += ["test_hydra_sweep0/0", "test_hydra_sweep0/1"]
PERF_MONITOR = "\nperf_monitor:\n  _target_: segperf.PerfMonitor\n"


def test_the_templates_own_suite_passes_with_perf_monitor_in_its_callbacks(tmp_path_factory):
    installed = install_wheel(tmp_path_factory.mktemp("wheel"))
    got = installed.run("-m", "pip", "install", "-q", "--disable-pip-version-check", *TEMPLATE_NEEDS)
    assert got.returncode == 0, f"installing the template's requirements from the package index: {got.stderr[-2000:]}"

    project = installed.work / "project"
    shutil.copytree(TEMPLATE, project, ignore=shutil.ignore_patterns("__pycache__"))
    with (project / "configs" / "callbacks" / "default.yaml").open("a") as callbacks:
        callbacks.write(PERF_MONITOR)

    # the user's shell with the environment activated: the sweep test runs `python src/train.py`.
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: the template (2023) predates torch 2.6's weights_only=True;
    # its checkpoints hold the net and the optimizer's partial in their hyperparameters, so without
    # it the tests that load one fail as well without PerfMonitor (torch's own switch, for trusted files)
    env = {k: v for k, v in installed.activated_env().items() if not k.startswith("PYTEST_")}
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    basetemp, report = installed.root / "template-tmp", installed.root / "template-suite.xml"
    pytest_args = ["-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={basetemp}", f"--junitxml={report}"]
    done = installed.run_with(env, *pytest_args, *SUITE, cwd=project, timeout=540)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]

    suite = ET.parse(report).getroot().find("testsuite")
    counts = {key: int(suite.get(key)) for key in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": TESTS, "failures": 0, "errors": 0, "skipped": 0}

    where = installed.run_with(env, "-c", "import segperf; print(segperf.__file__)", cwd=project)
    assert Path(where.stdout.strip()).resolve().is_relative_to((installed.root / "env").resolve())
    for run in RUNS:
        record = json.loads((basetemp / run / "results.json").read_text())
        assert record["status"] == "completed", (run, record.get("error"))
        assert record["train"]["steps"] >= 1
    ddp = json.loads((basetemp / "test_train_ddp_sim0" / "results.json").read_text())
    assert ddp["distributed"]["world_size"] == 2 and len(ddp["distributed"]["ranks"]) == 2
