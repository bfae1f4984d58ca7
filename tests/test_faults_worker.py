"""A DataLoader worker killed from outside (the kernel's out-of-memory killer, `kill -9`): one
line that says a worker died, by which signal, and what to try; the run's record is saved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from torch.utils.data import DataLoader, Dataset

from segperf.errors import explain, is_worker_error
from tests.conftest import REPO, TINY, raises_from_loader


class KilledInAWorker(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_is_explained_by_the_signal_and_what_to_try():
    with raises_from_loader(RuntimeError) as caught:
        next(iter(DataLoader(KilledInAWorker(), num_workers=1)))
    assert is_worker_error(caught.value)
    message = explain(caught.value)
    assert message.startswith("a DataLoader worker (pid ")
    assert "was killed by signal SIGKILL (Killed), most often the out-of-memory killer" in message
    assert "fewer workers (a smaller data.num_workers, or workers=off) or a smaller batch (batch_size=" in message
    assert len(message.splitlines()) == 1


def test_an_error_that_is_not_a_worker_is_left_as_it_is():
    error = RuntimeError("CUDA out of memory")
    assert not is_worker_error(error) and explain(error) == "CUDA out of memory"


# every sample kills the worker that loads it; workers are forked, so they run this patch too
KILLING_RUN = """
import os, signal, sys
import torch.utils.data
from segperf.data.carvana.dataset import CarvanaDataset

def killed(self, index):
    if torch.utils.data.get_worker_info() is None:
        raise AssertionError("a sample loaded outside a DataLoader worker")
    os.kill(os.getpid(), signal.SIGKILL)

CarvanaDataset.__getitem__ = killed
from segperf.train import cli
cli()
"""


@pytest.mark.slow
def test_a_run_whose_worker_is_killed_stops_with_one_line_and_saves_its_record(tiny_carvana, tmp_path):
    run = tmp_path / "run"
    args = [*TINY, f"data.root={tiny_carvana}", "data.num_workers=1", f"hydra.run.dir={run}"]
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", KILLING_RUN, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("segperf: error: ")]
    assert errors == [done.stderr.strip().splitlines()[-1]]
    assert "a DataLoader worker (pid " in errors[0] and "killed by signal SIGKILL" in errors[0]
    assert "batch_size=" in errors[0]
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed"
    assert results["error"] == errors[0].removeprefix("segperf: error: ")
