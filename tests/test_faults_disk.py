"""A full disk or a folder that cannot be written: one `segperf: error:` line naming the folder
and the cause, exit status 2, no traceback, no half-written file, and what was finished before
(a checkpoint, an earlier results.json) intact. On real small tmpfs mounts (root can mount them,
as CI does; elsewhere these tests are skipped) and read-only ones (chmod does not stop root)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from segperf.errors import WriteError, write_problem
from segperf.perf.results import write_json_atomic
from segperf.training.checkpoints import AtomicCheckpointIO, load_weights_only
from tests.conftest import MNIST_TINY, run_cli


@pytest.fixture
def mount(tmp_path):
    """mount(name, size, read_only=False) -> a fresh tmpfs of `size` bytes at tmp_path/name."""
    mounted: list[Path] = []

    def make(name: str, size: int, read_only: bool = False) -> Path:
        point = tmp_path / name
        point.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip() or done.returncode})")
        mounted.append(point)
        return point

    yield make
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(folder: Path) -> None:
    """Write until the file system says it is full."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for block in (65536, 4096, 1):
            try:
                while f.write(b"\0" * block):
                    pass
            except OSError as error:
                assert error.errno == errno.ENOSPC


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith(".tmp") or ".tmp" in p.name)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("segperf: error: ")]


# -- the atomic writes on a full disk ------------------------------------------------------------


def test_a_full_disk_keeps_the_earlier_results_and_leaves_no_temp_file(mount):
    disk = mount("disk", 256 * 1024)
    write_json_atomic(disk / "results.json", {"status": "completed", "earlier": True})
    fill(disk)
    with pytest.raises(WriteError) as error:
        write_json_atomic(disk / "results.json", {"status": "completed", "padding": "x" * 200_000})
    assert str(error.value) == f"{disk}: no space left on device (writing results.json)"
    assert json.loads((disk / "results.json").read_text()) == {"status": "completed", "earlier": True}
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "results.json"]


def test_a_checkpoint_that_does_not_fit_keeps_the_previous_one_and_names_the_folder(mount):
    disk = mount("disk", 3 * 1024 * 1024)
    io, path = AtomicCheckpointIO(), disk / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 2, "w": torch.ones(400_000)}, path)  # 1.6 MB: one fits, two do not
    with pytest.raises(WriteError) as error:  # torch.save turns the OSError into a RuntimeError: seen through
        io.save_checkpoint({"global_step": 4, "w": torch.ones(400_000)}, path)
    assert str(error.value) == f"{disk / 'checkpoints'}: no space left on device (writing last.ckpt)"
    assert load_weights_only(path)["global_step"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]
    line = write_problem(error.value)
    assert line.startswith(f"{disk / 'checkpoints'}: no space left on device (writing last.ckpt); free some space")
    assert "hydra.run.dir=" in line


def test_a_full_cache_folder_leaves_no_half_built_data_set(mount):
    from segperf.data.carvana.synthetic import ensure_synthetic

    cache = mount("cache", 128 * 1024)
    with pytest.raises(WriteError) as error:
        ensure_synthetic(cache, cars=2, seed=0, width=240, height=160)
    assert str(error.value).startswith(f"{cache}: no space left on device (writing carvana-synthetic-")
    assert "SEGPERF_CACHE=" in write_problem(error.value)
    assert list(cache.iterdir()) == []


# -- a run, from the command line ----------------------------------------------------------------


@pytest.mark.slow
def test_a_disk_that_fills_during_the_run_stops_it_with_one_line_and_keeps_the_first_checkpoint(
    mount, tiny_mnist, tmp_path
):
    disk = mount("disk", 7 * 1024 * 1024)  # the CNN's checkpoint is ~5 MB: the first fits, a second does not
    run = disk / "run"
    args = [*MNIST_TINY, f"data.root={tiny_mnist}", "val_every_images=64", f"hydra.run.dir={run}"]
    done = run_cli(args, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Logging error" not in done.stderr
    assert error_lines(done.stderr) == [done.stderr.strip().splitlines()[-1]]  # one line, the last
    line = error_lines(done.stderr)[0]
    assert line.startswith(f"segperf: error: {run / 'checkpoints'}: no space left on device (writing last.ckpt)")
    assert leftovers(run) == []
    assert load_weights_only(run / "checkpoints" / "last.ckpt")["global_step"] == 2  # the first one, whole
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and "no space left on device" in results["error"]


def test_a_full_disk_stops_the_run_before_hydra_writes_and_keeps_the_earlier_results(mount, tmp_path):
    disk = mount("disk", 512 * 1024)
    run = disk / "run"
    write_json_atomic(run / "results.json", {"status": "completed", "earlier": True})
    fill(disk)
    done = run_cli(["train_images=4", f"hydra.run.dir={run}"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"segperf: error: {run}: no space left on device (where the run folder {run} goes); "
        f"free some space there, or write elsewhere (hydra.run.dir=<a folder on another disk>)"
    ]
    assert json.loads((run / "results.json").read_text()) == {"status": "completed", "earlier": True}
    assert sorted(p.name for p in run.iterdir()) == ["results.json"]


@pytest.mark.slow
def test_a_read_only_folder_stops_the_run_and_the_inference_with_one_line(mount, tmp_path):
    read_only = mount("ro", 64 * 1024, read_only=True)
    for module, args in (("segperf.train", []), ("segperf.infer", ["ckpt=nowhere.ckpt"])):
        command = [sys.executable, "-m", module, *args, f"hydra.run.dir={read_only / 'run'}"]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr[-3000:]
        prefix = "segperf: error: " if module == "segperf.train" else "segperf.infer: error: "
        assert done.stderr.strip().splitlines() == [
            f"{prefix}{read_only}: read-only file system (where the run folder {read_only / 'run'} goes); "
            "choose a folder you can write to (hydra.run.dir=<folder>)"
        ]
    assert list(read_only.iterdir()) == []
