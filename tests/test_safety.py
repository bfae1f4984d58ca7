"""A run writes only to its run folder, the configured cache folder and the data folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.config import TOOL_CACHES
from segperf.training.compile_cache import SHARED


@pytest.mark.slow
def test_compiler_and_plotting_caches_go_to_the_segperf_cache_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in TOOL_CACHES} | {"SEGPERF_CACHE": str(tmp_path)}
    script = (  # what each command's entry does first (segperf/train.py); importing segperf routes nothing
        "import os\n"
        "from segperf.command_line import set_up_command\n"
        "set_up_command()\n"
        "from torch._inductor.runtime.runtime_utils import cache_dir\n"
        "import matplotlib\n"
        "print(cache_dir()); print(matplotlib.get_cachedir()); print(os.environ['TRITON_CACHE_DIR'])"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [
        str(tmp_path / "torchinductor"),
        str(tmp_path / "matplotlib"),
        str(tmp_path / "triton"),
    ]


def test_a_test_process_caches_in_a_folder_of_its_own_not_the_users():
    """Concurrent compiles into one torchinductor folder once corrupted it (see tests/conftest.py):
    each test process, each xdist worker, compiles into its own, and never into ~/.cache/segperf."""
    from torch._inductor.runtime.runtime_utils import cache_dir

    from segperf.config import segperf_cache_dir
    from tests.conftest import TEST_CACHE

    if TEST_CACHE is None:
        pytest.skip("SEGPERF_CACHE is set in the environment: the test run uses the folder it names")
    cache = segperf_cache_dir()
    assert cache != Path("~/.cache/segperf").expanduser()
    assert cache == TEST_CACHE / os.environ.get("PYTEST_XDIST_WORKER", "main")
    # the shared folder (not the xdist controller's, which the worker inherited); an earlier compiled run in
    # this process compiles into its copy beside it (segperf.training.compile_cache)
    assert Path(os.environ.get(SHARED) or cache_dir()) == cache / "torchinductor"
    assert Path(cache_dir()).is_relative_to(cache)
    assert Path(os.environ["TRITON_CACHE_DIR"]) == cache / "triton"


def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.slow
def test_a_run_writes_nothing_outside_its_run_folder_cache_and_data(tmp_path, tiny_carvana):
    home, temp, cache, cwd = (tmp_path / name for name in ("home", "tmp", "cache", "cwd"))
    for folder in (home, temp, cwd):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in TOOL_CACHES}
    env |= {"HOME": str(home), "TMPDIR": str(temp), "SEGPERF_CACHE": str(cache), "NO_ALBUMENTATIONS_UPDATE": "1"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    data_before = files_under(tiny_carvana)
    done = subprocess.run(
        [sys.executable, "-m", "segperf.train", "data.height=64", "data.width=96", "train_images=4", "val_images=2",
         "batch_size=2", "val_every_images=4", "trainer.enable_progress_bar=false", f"data.root={tiny_carvana}",
         f"hydra.run.dir={cwd / 'run'}"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_under(home) == [] and files_under(temp) == []
    assert [p.name for p in cwd.iterdir()] == ["run"]
    assert files_under(tiny_carvana) == data_before
    assert (cwd / "run" / "results.json").is_file()
