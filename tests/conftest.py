"""Shared fixtures: tiny Carvana-format data made once per session, and the real config
composed with Hydra's compose API and shrunk for the CPU."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

# set by the test process that made the test run's cache folders (the xdist controller, or a plain pytest)
TEST_CACHE_ROOT = "SEGPERF_TEST_CACHE_ROOT"


def give_each_test_process_its_own_cache() -> Path | None:
    """Point SEGPERF_CACHE at a folder of this test process's own, in a temporary folder of the test
    run, removed when the run ends; returns that temporary folder (None: the user set SEGPERF_CACHE).

    Why: segperf routes torch.compile's cache (TORCHINDUCTOR_CACHE_DIR) and Triton's into
    $SEGPERF_CACHE (segperf.config.route_tool_caches). pytest-xdist workers compiling at once into one
    shared torchinductor folder once left it corrupt, and every later `+opt=all` run, tests and the
    user's own, crashed (-11, -6). Each worker gets its own folder, and the user's ~/.cache/segperf is
    neither written nor read by tests. Must run before the set-up below routes the tool caches, as a
    segperf command's entry does. xdist starts the workers from the controller, which has already imported segperf, so a
    worker finds the controller's folders in its environment and replaces them with its own.
    A SEGPERF_CACHE the user set is kept (theirs to share between workers or not)."""
    root = os.environ.get(TEST_CACHE_ROOT)
    if root is None:
        if "SEGPERF_CACHE" in os.environ:
            return None
        root = tempfile.mkdtemp(prefix="segperf-test-cache-")
        os.environ[TEST_CACHE_ROOT] = root
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    for variable, value in list(os.environ.items()):  # the controller's tool caches, inherited: routed anew
        if value.startswith(root + os.sep) and variable != "SEGPERF_CACHE":
            del os.environ[variable]
    os.environ["SEGPERF_CACHE"] = os.path.join(root, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    return Path(root)


TEST_CACHE = give_each_test_process_its_own_cache()

from segperf.command_line import set_up_command  # noqa: E402

# what each segperf command does at its entry (importing segperf does not): the tests run commands'
# jobs and compose their configs in this process too. Before anything here imports Lightning.
set_up_command()

from segperf.config import CONFIG_DIR, available_cores  # noqa: E402
from segperf.data.carvana.synthetic import generate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# another project's test suite, run by tests/test_template_suite.py in its own environment, not here
collect_ignore = ["fixtures/lightning_hydra_template"]


def share_the_cores_between_xdist_workers() -> None:
    """Under pytest-xdist (`make test` runs `pytest -n 2`) each worker's torch gets its share of the
    cores: two workers of two threads each on two cores wait for each other at every operation (the
    fast tier took a third longer). Set before any test module imports segperf.training.run, which
    reads torch's thread count as "torch's own choice" to restore between sweep jobs."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, available_cores() // workers))


share_the_cores_between_xdist_workers()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `serial` test must also be `slow`: `make test-fast` has no serial pass (starting one cost
    ~7 s of the fast tier), and its parallel pass leaves serial tests out."""
    fast_serial = [
        item.nodeid for item in items if item.get_closest_marker("serial") and not item.get_closest_marker("slow")
    ]
    if fast_serial:
        raise pytest.UsageError(
            f"mark these serial tests slow as well (make test-fast runs no serial test): {fast_serial}"
        )


# no progress bar or model summary in the test output; a logged step for every step
QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.log_every_n_steps=1"]
# small everything: 64x96 model input (divisible by 16), 240x160 source images; no peak probe (~1 s per
# run on a busy machine, where it is not cached; tests/test_peak.py and test_measurement.py run it)
TINY = [
    "perf.peak_probe=false",
    "data.height=64",
    "data.width=96",
    "train_images=8",
    "val_images=4",
    "batch_size=4",
    "val_every_images=4",
    *QUIET,
]
# the same U-Net at a quarter of the width (a sixteenth of the FLOPs and of the weights): fast
# tests assert what a run does and records, not what it learns (tests/test_learning.py trains the
# full net), and a step of the full-width net costs seconds on a busy 2-core CPU, tens of them in bf16
# emulated without native bf16 instructions. Kept out of TINY, which also sizes commands without a U-Net.
NARROW_UNET = ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]


@pytest.fixture(scope="session")
def tiny_carvana(tmp_path_factory) -> Path:
    """5 cars x 16 views in Kaggle's layout: 4 train cars (64 images), 1 val car (16 images)."""
    return generate(tmp_path_factory.mktemp("data") / "carvana", cars=5, seed=1, width=240, height=160)


# what the DataModule reports about tiny_carvana (results.json's "dataset"), its root left out
TINY_CARVANA_SUMMARY = {
    "root": None,
    "synthetic": False,
    "images": 80,
    "cars": 5,
    "train_images": 64,
    "val_images": 16,
    "train_cars": 4,
    "val_cars": 1,
    "skipped": [],
    "bad_files": [],  # every bad file, whatever the policy (none here)
    "page_cache": "warm",
    "page_cache_method": None,
}


@pytest.fixture
def carvana_copy(tiny_carvana, tmp_path) -> Path:
    """A copy of the tiny Carvana data that a test may damage (truncate, delete, add files)."""
    root = tmp_path / "carvana"
    shutil.copytree(tiny_carvana, root)
    return root


def images_of(root: Path) -> list[Path]:
    """The training images of a Carvana-layout folder, sorted."""
    return sorted((root / "train").glob("*.jpg"))


def mask_of(image: Path) -> Path:
    """The mask Kaggle's layout pairs with `image`."""
    return image.parent.parent / "train_masks" / f"{image.stem}_mask.gif"


# the CPU study's workload, tiny: 256 built-in training digits, 64 test digits, batch 32
MNIST_TINY = [
    "perf.peak_probe=false",
    "model=cnn",
    "data=mnist",
    "train_images=128",
    "val_images=64",
    "batch_size=32",
    "val_every_images=128",
    *QUIET,
]


@pytest.fixture(scope="session")
def tiny_mnist(tmp_path_factory) -> Path:
    """The built-in digits in MNIST's four IDX files: 256 training and 64 test images."""
    from segperf.data.mnist.digits import generate as generate_digits

    return generate_digits(tmp_path_factory.mktemp("data") / "mnist", train=256, test=64, seed=0)


def compose_config(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


@pytest.fixture
def tiny_cfg(tiny_carvana):
    """compose_config with the tiny run size, the narrow U-Net and the data folder; extra overrides go last."""

    def make(*overrides: str) -> DictConfig:
        return compose_config(*TINY, *NARROW_UNET, f"data.root={tiny_carvana}", *overrides)

    return make


@contextmanager
def raises_from_loader(expected: type[BaseException], match: str | None = None) -> Iterator[pytest.ExceptionInfo]:
    """pytest.raises for an error out of a DataLoader's iterator; the iterator's workers stop as soon
    as the block ends.

    Why: the error's traceback holds the iterator, and a multi-process iterator left to the garbage
    collector waits 5 s for each worker to exit (torch's MP_STATUS_CHECK_INTERVAL): the collector has
    already finalized the iterator's queues, so the stop message never reaches the worker. That 5 s
    landed in whichever later test collected it. Clearing the traceback's finished frames drops the
    iterator at once, while its queues still work."""
    with pytest.raises(expected, match=match) as caught:
        yield caught
    traceback.clear_frames(caught.tb)


def run_cli(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None):
    """`python -m segperf.train ...` as a user runs it; returns the CompletedProcess."""
    import subprocess

    full_env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "segperf.train", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
